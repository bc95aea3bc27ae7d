#!/usr/bin/env bash
# A throwaway PostgreSQL cluster on loopback, for the store's tests and
# benchmarks (fsync=off: never for data you want to keep).
#
#   eval "$(tools/pg_cluster.sh start)"   # exports DENSEGATE_PG_URL, DENSEGATE_PG_DIR
#   tools/pg_cluster.sh stop              # stops it and deletes $DENSEGATE_PG_DIR
#
# `start` prints the two export lines on stdout and everything else on
# stderr. As root, the server runs as the `postgres` user (postgres refuses
# root), in a temporary directory that user owns. Port: PGPORT_PREFERRED
# (default 55432, stable so Bazel can cache test results) if free, else a
# random free one.
set -euo pipefail

bindir="${PG_BINDIR:-}"
if [[ -z "$bindir" ]]; then
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/pg_ctl" ]] && bindir="$d"
  done
fi
if [[ -z "$bindir" || ! -x "$bindir/pg_ctl" ]]; then
  echo "pg_cluster: no PostgreSQL server binaries (expected /usr/lib/postgresql/*/bin/pg_ctl);" \
       "install postgresql-15 (tools/bootstrap.sh --test)" >&2
  exit 1
fi

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

port_free() {
  ! ss -ltnH "sport = :$1" 2>/dev/null | grep -q .
}

cmd="${1:-}"
case "$cmd" in
  start)
    dir="$(mktemp -d -t densegate-pg.XXXXXX)"
    chmod 755 "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    if ! as_owner "$bindir/initdb" -D "$dir/data" -A trust -U densegate \
         --no-sync >"$dir/initdb.log" 2>&1; then
      cat "$dir/initdb.log" >&2
      rm -rf "$dir"
      exit 1
    fi
    candidates=("${PGPORT_PREFERRED:-55432}")
    for _ in 1 2 3 4 5 6 7 8; do candidates+=($((20000 + RANDOM % 30000))); done
    for port in "${candidates[@]}"; do
      port_free "$port" || continue
      if as_owner "$bindir/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30 \
           -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" \
           start >/dev/null 2>&1; then
        echo "pg_cluster: PostgreSQL running on 127.0.0.1:$port, data in $dir (fsync=off)" >&2
        echo "export DENSEGATE_PG_URL=postgresql://densegate@127.0.0.1:$port/postgres"
        echo "export DENSEGATE_PG_DIR=$dir"
        exit 0
      fi
    done
    echo "pg_cluster: could not start PostgreSQL; server log:" >&2
    tail -n 20 "$dir/log" >&2 || true
    rm -rf "$dir"
    exit 1
    ;;
  stop)
    dir="${2:-${DENSEGATE_PG_DIR:-}}"
    if [[ -z "$dir" || ! -d "$dir/data" ]]; then
      echo "pg_cluster: nothing to stop (pass the directory or set DENSEGATE_PG_DIR)" >&2
      exit 0
    fi
    as_owner "$bindir/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
  *)
    echo "usage: tools/pg_cluster.sh start|stop [DIR]" >&2
    exit 2
    ;;
esac
