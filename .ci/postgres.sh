# A throwaway PostgreSQL cluster for the tests, sourced by .ci/test:
#   postgres_start   installs Debian's postgresql when missing, runs initdb under target/postgres,
#                    starts the server on 127.0.0.1 and a free port, and exports
#                    GATEHOUSE_TEST_DATABASE_URL (a superuser URL: each test creates its database)
#                    and GATEHOUSE_TEST_PG_BIN (where pg_ctl is, for tests that stop the server)
#   postgres_stop    stops that server by its PID and removes the cluster
# install_packages comes from .ci/packages.sh. PostgreSQL refuses to run as root, so as root the
# cluster belongs to the `postgres` user that the Debian package creates.

pg_bindir() {
  local dir
  for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
  done
  command -v initdb >/dev/null 2>&1 && { dirname "$(command -v initdb)"; return 0; }
  return 1
}

# Runs a PostgreSQL program as the cluster's owner.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

postgres_start() {
  local bin
  if ! bin=$(pg_bindir); then
    install_packages postgresql
    bin=$(pg_bindir) || { echo "postgresql was installed but initdb is not found" >&2; exit 1; }
  fi
  # Debian's package starts a cluster of its own on 5432; the tests never use it.
  PG_DATA="$PWD/target/postgres/data"
  rm -rf "$PWD/target/postgres"
  mkdir -p "$PWD/target/postgres"
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres "$PWD/target/postgres"
    if ! runuser -u postgres -- test -w "$PWD/target/postgres"; then
      # The checkout is somewhere the postgres user cannot reach (a home directory of mode 700).
      PG_DATA=$(mktemp -d /tmp/gatehouse-postgres.XXXXXX)/data
      chown postgres "$(dirname "$PG_DATA")"
      echo "note: the postgres user cannot reach target/, so the cluster is in $(dirname "$PG_DATA")"
    fi
  fi
  local port
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  pg_as_owner "$bin/initdb" -D "$PG_DATA" -U gatehouse --auth=trust --no-sync -E UTF8 >/dev/null
  # fsync stays on: the tests kill servers and PostgreSQL itself, and check that nothing
  # acknowledged was lost.
  pg_as_owner "$bin/pg_ctl" -D "$PG_DATA" -l "$(dirname "$PG_DATA")/server.log" -w -t 30 \
    -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='' -c max_connections=400" \
    start >/dev/null
  PG_PID=$(head -n 1 "$PG_DATA/postmaster.pid")
  export GATEHOUSE_TEST_DATABASE_URL="postgres://gatehouse@127.0.0.1:$port/postgres"
  export GATEHOUSE_TEST_PG_BIN="$bin"
  export GATEHOUSE_TEST_PG_DATA="$PG_DATA"
  echo "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (pid $PG_PID)"
}

postgres_stop() {
  [ -n "${PG_DATA:-}" ] || return 0
  # The postmaster's PID now (a test may have restarted it), else the one it started with.
  local pid
  pid=$(head -n 1 "$PG_DATA/postmaster.pid" 2>/dev/null || echo "${PG_PID:-}")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -INT "$pid" 2>/dev/null || true   # fast shutdown
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$(dirname "$PG_DATA")"
  PG_DATA=""
}
