# Sourced by .ci/run (and usable by hand: `source .ci/postgres.sh && pg_start`): a throwaway
# PostgreSQL server from Debian's packages, on 127.0.0.1 only, for the store, lease and service
# tests. pg_start exports DLSCHED_TEST_PG_URL and PG_PID; pg_stop stops that server by its PID.
# Needs root (it installs the package and runs the server as the postgres user).

pg_install() {
  if ! command -v apt-get >/dev/null; then
    echo "ci: apt-get not found: CI must run the database tests on PostgreSQL (Debian's packages)" >&2
    return 1
  fi
  # no default cluster on port 5432: the tests start their own, bound to 127.0.0.1
  mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/dlsched-ci.conf
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
}

pg_start() {
  local bin dir port password
  bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "ci: no PostgreSQL server binaries under /usr/lib/postgresql" >&2
    return 1
  fi
  dir=$(mktemp -d /tmp/dlsched-ci-pg.XXXXXX)
  PG_DIR=$dir
  chown postgres: "$dir"
  password=$(python -c 'import secrets; print(secrets.token_hex(16))')
  port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  printf '%s\n' "$password" > "$dir/pwfile"
  chown postgres: "$dir/pwfile"
  chmod 600 "$dir/pwfile"
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -U postgres --auth=scram-sha-256 --pwfile="$dir/pwfile" \
    -E UTF8 >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; return 1; }
  rm -f "$dir/pwfile"
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=200 -c fsync=off" start >/dev/null \
    || { cat "$dir/server.log" >&2; return 1; }
  PG_PID=$(head -n 1 "$dir/data/postmaster.pid")
  runuser -u postgres -- env PGPASSWORD="$password" "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres dlsched_test
  export PG_PID PG_DIR
  export DLSCHED_TEST_PG_URL="postgresql+psycopg://postgres:$password@127.0.0.1:$port/dlsched_test"
  echo "ci: PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (pid $PG_PID)"
}

pg_stop() {
  [ -n "${PG_PID:-}" ] || return 0
  kill -INT "$PG_PID" 2>/dev/null || true  # SIGINT: PostgreSQL's fast shutdown
  for _ in $(seq 1 100); do
    kill -0 "$PG_PID" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$PG_PID" 2>/dev/null || true
  PG_PID=
}

pg_cleanup() {  # the EXIT trap: stop the server, remove its files
  pg_stop
  [ -z "${PG_DIR:-}" ] || rm -rf "$PG_DIR"
}
