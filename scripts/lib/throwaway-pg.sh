# Sourced by clients/run-tests.sh and scripts/schemathesis/run.sh: a PostgreSQL database
# for a run against a real `idemwatch serve`, exported as IDEMWATCH_TEST_PG_URL.
#   - IDEMWATCH_TEST_PG_URL: a database to use as is;
#   - else TEST_DATABASE_URL (a server; the user may CREATE DATABASE): a fresh database on it;
#   - else, with initdb/pg_ctl installed (PG_BIN, else the newest under /usr/lib/postgresql),
#     a throwaway cluster on a free loopback port (run as postgres when we are root).
# The caller sets WORK (a scratch directory), TAG (a word for messages and the database
# name) and calls pg_cleanup on exit. Leaves IDEMWATCH_TEST_PG_URL unset when none is found.

PG_STOP=()
PG_DROP_DB=

pg_cleanup() {
  if ((${#PG_STOP[@]})); then "${PG_STOP[@]}" >/dev/null 2>&1 || true; fi
  if [[ -n ${PG_DROP_DB:-} ]]; then
    psql "$TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $PG_DROP_DB WITH (FORCE)" >/dev/null 2>&1 || true
  fi
}

pg_bin() {
  if [[ -n ${PG_BIN:-} ]]; then echo "$PG_BIN"; return; fi
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    [[ -x $d/pg_ctl ]] && { echo "$d"; return; }
  done
  command -v pg_ctl >/dev/null 2>&1 && dirname "$(command -v pg_ctl)"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pg_start_cluster() {
  local bin=$1 dir=$WORK/pg run=()
  mkdir -p "$dir"
  chmod 755 "$WORK"
  if [[ $(id -u) == 0 ]]; then
    chown postgres:postgres "$dir" || return 1
    run=(runuser -u postgres --)
  fi
  "${run[@]}" "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync >/dev/null || return 1
  local port
  port=$(free_port)
  "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off" >/dev/null || {
    cat "$dir/log" >&2
    return 1
  }
  PG_STOP=("${run[@]}" "$bin/pg_ctl" -D "$dir/data" -m immediate stop)
  export IDEMWATCH_TEST_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

pg_find() {
  local bin
  if [[ -n ${IDEMWATCH_TEST_PG_URL:-} ]]; then
    echo "$TAG: PostgreSQL from IDEMWATCH_TEST_PG_URL"
  elif [[ -n ${TEST_DATABASE_URL:-} ]] && command -v psql >/dev/null 2>&1; then
    PG_DROP_DB="idemwatch_${TAG}_$$"
    psql "$TEST_DATABASE_URL" -qc "CREATE DATABASE $PG_DROP_DB" >/dev/null || return 2
    export IDEMWATCH_TEST_PG_URL="${TEST_DATABASE_URL%/*}/$PG_DROP_DB"
    echo "$TAG: PostgreSQL database $PG_DROP_DB on TEST_DATABASE_URL"
  elif bin=$(pg_bin) && [[ -n $bin ]]; then
    if pg_start_cluster "$bin"; then
      echo "$TAG: PostgreSQL throwaway cluster at $IDEMWATCH_TEST_PG_URL"
    else
      echo "$TAG: could not start a PostgreSQL cluster with $bin" >&2
    fi
  fi
  return 0
}
