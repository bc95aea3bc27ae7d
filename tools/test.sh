#!/usr/bin/env bash
# The whole test suite: every test, then the ASan+UBSan configuration.
# Installs what it needs first when missing, and ends with a line
# "tests: N passed, N failed" counting both runs.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
tools/bootstrap.sh --test || exit 1

log="$(mktemp -t densegate-test.XXXXXX)"
trap 'rm -f "$log"' EXIT

# A throwaway PostgreSQL cluster for the PostgreSQL store tests
# (results/store), stopped on exit. Without it they skip, or fail under CI.
if [[ -z "${DENSEGATE_PG_URL:-}" ]] && pg_env="$(tools/pg_cluster.sh start)"; then
  eval "$pg_env"
  trap 'tools/pg_cluster.sh stop; rm -f "$log"' EXIT
fi

status=0
run() {
  echo "== bazel test $*" >&2
  bazel test --color=no --curses=no "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  [[ $rc -ne 0 ]] && status=$rc
  return 0
}

run //...
run --config=asan //...

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|NO STATUS|INCOMPLETE)' "$log")
if [[ $status -ne 0 && $failed -eq 0 ]]; then
  failed=1  # Bazel failed before any test ran (analysis or build error).
fi
echo "tests: $passed passed, $failed failed"
exit $status
