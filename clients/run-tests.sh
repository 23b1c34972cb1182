#!/usr/bin/env bash
# The clients' tests against the real binary: the Python client (pytest), the TypeScript client
# (node's test runner) and `gatehouse mcp` driven by the official MCP Python SDK over stdio.
# Installs what is missing (Python's venv, Node.js) and puts the Python tools into
# target/tools/clients; `.ci/test` runs this.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"

source .ci/packages.sh

have node || install_packages nodejs
venv=target/tools/clients
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv" || { install_packages python3-venv && python3 -m venv "$venv"; }
fi
# Installed again whenever the requirements change (a kept venv gets what was added).
if ! cmp -s clients/requirements-test.txt "$venv/requirements-test.txt"; then
  "$venv/bin/pip" install --quiet --requirement clients/requirements-test.txt
  cp clients/requirements-test.txt "$venv/requirements-test.txt"
fi
# The client as a user installs it, fresh each run (the tests import the installed package).
"$venv/bin/pip" install --quiet --force-reinstall --no-deps ./clients/python

cargo build --locked --quiet
export GATEHOUSE_BIN="$repo/target/debug/gatehouse"
echo "-- the Python client, and gatehouse mcp under the official MCP Python SDK"
"$venv/bin/python" -m pytest -q -p no:cacheprovider clients/python/tests tests/mcp
echo "-- the TypeScript client"
(cd clients/typescript && node --test test/)
