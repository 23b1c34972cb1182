#!/usr/bin/env bash
# Profiles gatehouse's answer path and GET path under load and draws their flame graphs.
#
#   benches/profile/run.sh [OUT_DIR]       (default: benches/profile)
#
# Builds a release binary with line tables (target/profiling), starts `gatehouse serve` on a
# scratch SQLite file in target/, opens gates with open_gates.py, and records the server (and only
# the server) with `perf record --call-graph dwarf` while wrk, at 64 connections, answers each gate
# once (answer.lua) and then GETs one gate. Needs perf (linux-perf), wrk, python3 and inferno
# (installed into target/tools/inferno when missing). Loopback only; ends what it starts by PID.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-benches/profile}
scratch=target/profile-run
gates=${GATES:-30000}
seconds=${SECONDS_PER_PATH:-6}
connections=64
threads=2

need() { command -v "$1" >/dev/null || { echo "profile: $1 is missing ($2)" >&2; exit 1; }; }
need perf "apt-get install linux-perf"
need wrk "apt-get install wrk"
need python3 "a Python 3"
inferno=target/tools/inferno/bin
[[ -x $inferno/inferno-flamegraph ]] || cargo install inferno --locked --root target/tools/inferno

CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release --target-dir target/profiling
exe=target/profiling/release/gatehouse

rm -rf "$scratch" && mkdir -p "$scratch" "$out"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$exe" serve --bind "127.0.0.1:$port" --db "$scratch/gatehouse.db" --sync full \
    --max-connections 1024 --max-unauthenticated-per-address 1024 2>"$scratch/server.log" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
for _ in $(seq 100); do
    grep -q "listening on" "$scratch/server.log" && break
    sleep 0.1
done

# The server's stacks only: its PID, sampled at 499 Hz with DWARF unwinding.
profile() { # NAME, then the load's command
    local name=$1
    shift
    perf record -F 499 --call-graph dwarf,16384 -p "$server" -o "$scratch/$name.data" -- sleep "$seconds" \
        2>"$scratch/$name.perf.log" &
    local recorder=$!
    sleep 0.2
    "$@" | tee "$scratch/$name.wrk.txt"
    wait "$recorder"
    perf script -i "$scratch/$name.data" 2>/dev/null | "$inferno/inferno-collapse-perf" >"$scratch/$name.folded"
    "$inferno/inferno-flamegraph" --minwidth 1 --title "gatehouse: $name, $connections connections (perf, $seconds s)" \
        <"$scratch/$name.folded" >"$out/$name.svg"
    echo "profile: $out/$name.svg"
}

echo "profile: opening $gates gates"
python3 benches/profile/open_gates.py 127.0.0.1 "$port" "$gates" >"$scratch/gates.txt"
PATHS="$scratch/gates.txt" THREADS=$threads profile answer \
    wrk -t$threads -c$connections -d"${seconds}s" -s benches/profile/answer.lua "http://127.0.0.1:$port"
gate=$(tail -n1 "$scratch/gates.txt")
profile get wrk -t$threads -c$connections -d"${seconds}s" "http://127.0.0.1:$port$gate"
