"""The README's Python example, run as it is written against a real server (its URL swapped in),
while a person answers over HTTP."""

from __future__ import annotations

import contextlib
import io
import re
import threading

from conftest import REPO, Server, eventually


def readme_block(marker: str) -> str:
    readme = (REPO / "README.md").read_text()
    found = re.search(rf"<!-- {marker} -->\n```\w+\n(.*?)```", readme, re.S)
    assert found, f"README has a block after <!-- {marker} -->"
    return found.group(1)


def test_the_readme_python_example_runs(server: Server) -> None:
    code = readme_block("python-example").replace("http://127.0.0.1:8080", server.url)
    printed = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "README.md", "exec"), {})

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with server.http() as http:
        gate = eventually("the example's gate", lambda: (http.get("/v1/gates?state=open").json()["gates"] or [None])[0])
        session, gate_id = gate["session_id"], gate["gate"]["id"]
        reply = http.post(f"/v1/sessions/{session}/gates/{gate_id}", json={"action": "answer", "values": {"answer": "yes"}})
        assert reply.status_code == 202
    thread.join(15)
    assert printed.getvalue() == "the person said yes\n"
