"""Opens gates on a gatehouse on loopback and prints their paths, one per line (profile set-up)."""
import http.client
import json
import sys
import uuid

host, port, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per_session = 500  # below the default --max-open-gates
conn = http.client.HTTPConnection(host, port)
session = loop_id = None
for n in range(count):
    if n % per_session == 0:
        session, loop_id = uuid.uuid4(), uuid.uuid4()
    body = json.dumps({"loop_id": str(loop_id), "tool_execution_id": str(uuid.uuid4()), "question": f"Profile question {n}: go ahead?"})
    conn.request("POST", f"/v1/sessions/{session}/gates", body, {"Content-Type": "application/json"})
    reply = conn.getresponse()
    view = json.loads(reply.read())
    if reply.status != 201:
        sys.exit(f"opening a gate: {reply.status} {view}")
    print(f"/v1/sessions/{session}/gates/{view['gate']['id']}")
