"""The real gatehouse binary for the client's tests: each test gets a server of its own on a
loopback port and a temporary database, stopped by its PID at the end.

`GATEHOUSE_BIN` names the binary (`.ci/test` sets it); by default the debug build of this
checkout.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import threading
import time
from typing import Iterator, List, Optional

import httpx
import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BINARY = os.environ.get("GATEHOUSE_BIN", str(REPO / "target" / "debug" / "gatehouse"))


class Server:
    """`gatehouse serve` as a child process."""

    def __init__(self, db: pathlib.Path, extra: Optional[List[str]] = None, bind: str = "127.0.0.1:0") -> None:
        self.db, self.extra = db, list(extra or [])
        self.log: List[str] = []
        self.process = subprocess.Popen(
            [BINARY, "serve", "--bind", bind, "--db", str(db), *self.extra],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        listening = threading.Event()
        self.url = ""

        def read() -> None:
            assert self.process.stderr is not None
            for line in self.process.stderr:
                self.log.append(line)
                found = re.search(r"listening on (http://[0-9.:]+)", line)
                if found and not listening.is_set():
                    self.url = found.group(1)
                    listening.set()

        threading.Thread(target=read, daemon=True).start()
        if not listening.wait(30):
            self.stop()
            raise RuntimeError("gatehouse did not start:\n" + "".join(self.log))

    @property
    def address(self) -> str:
        return self.url[len("http://") :]

    def restart(self) -> None:
        """SIGTERM, then the same database on the same port (clients keep their URL)."""
        address = self.address
        self.stop()
        self.__init__(self.db, self.extra, bind=address)  # type: ignore[misc]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def http(self, token: Optional[str] = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)


@pytest.fixture
def server(tmp_path: pathlib.Path) -> Iterator[Server]:
    running = Server(tmp_path / "gatehouse.db")
    yield running
    running.stop()


@pytest.fixture
def tokens_server(tmp_path: pathlib.Path) -> Iterator[Server]:
    tokens = tmp_path / "tokens"
    tokens.write_text(
        "admin root admin-secret-0123456789\n"
        "responder alice responder-secret-0123456789\n"
        "agent bot agent-secret-0123456789\n"
    )
    running = Server(tmp_path / "gatehouse.db", ["--tokens-file", str(tokens)])
    yield running
    running.stop()


def eventually(what: str, check, within: float = 15.0):  # type: ignore[no-untyped-def]
    """Polls `check` until it returns something true (which it returns), at most `within` s."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.05)
