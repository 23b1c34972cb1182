"""The READMEs' Python examples, run as they are written against a real server (its URL swapped
in), while a person answers over HTTP: the main README's, and the client README's permission gate
and form."""

from __future__ import annotations

import contextlib
import io
import re
import pathlib
import threading

from conftest import REPO, Server, eventually


def readme_block(marker: str, readme_path: pathlib.Path = REPO / "README.md") -> str:
    readme = readme_path.read_text()
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


def test_the_client_readme_permission_example_runs(server: Server) -> None:
    block = readme_block("python-permission-example", REPO / "clients" / "python" / "README.md")
    code = block.replace("http://127.0.0.1:8080", server.url)
    printed = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "clients/python/README.md", "exec"), {})

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with server.http() as http:
        gate = eventually("the example's gate", lambda: (http.get("/v1/gates?state=open").json()["gates"] or [None])[0])
        assert gate["gate"]["kind"] == "harness.permission" and gate["gate"]["tool_call"]["editable"]
        session, gate_id = gate["session_id"], gate["gate"]["id"]
        edit = {"action": "Approve", "values": {"tool_input": {"command": "git push --dry-run origin main"}}}
        reply = http.post(f"/v1/sessions/{session}/gates/{gate_id}", json=edit)
        assert reply.status_code == 202
    thread.join(15)
    assert printed.getvalue() == "running git push --dry-run origin main\n"


def test_the_client_readme_form_example_runs(server: Server) -> None:
    block = readme_block("python-form-example", REPO / "clients" / "python" / "README.md")
    code = block.replace("http://127.0.0.1:8080", server.url)
    printed = io.StringIO()

    def run() -> None:
        with contextlib.redirect_stdout(printed):
            exec(compile(code, "clients/python/README.md", "exec"), {})

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    with server.http() as http:
        gate = eventually("the example's gate", lambda: (http.get("/v1/gates?state=open").json()["gates"] or [None])[0])
        assert gate["gate"]["kind"] == "harness.form" and gate["gate"]["prompt"]["title"] == "Deploy"
        session, gate_id = gate["session_id"], gate["gate"]["id"]
        reply = http.post(f"/v1/sessions/{session}/gates/{gate_id}", json={"action": "accept", "values": {"target": "prod"}})
        assert reply.status_code == 202
    thread.join(15)
    assert printed.getvalue() == "deploying to prod\n"
