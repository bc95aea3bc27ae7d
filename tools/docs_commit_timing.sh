#!/usr/bin/env bash
# What a CI user waits for a docs-only commit on a team setup: `densegate
# serve` on PostgreSQL, one `densegate node`, `densegate submit --kind ci
# --wait`, timed end to end.
#
#   tools/docs_commit_timing.sh DENSEGATE_BINARY POSTGRES_URL WORK_DIR [COMMITS]
#
# Clones this repository (its root densegate.json is the manifest) into
# WORK_DIR/repo and submits COMMITS (default 2) docs-only commits in turn,
# each adding a line to runtime/README.md on top of the last: the first finds
# the node cold (nothing built yet), the later ones warm, as a node that has
# served CI before is. Prints one line per submit: seconds, exit code and
# the verdict's summary. The PostgreSQL database must be empty or densegate's.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  sed -n '2,13p' "$0" >&2
  exit 2
fi
bin="$(realpath "$1")" pg="$2" work="$3" commits="${4:-2}"
root="$(cd "$(dirname "$0")/.." && pwd)"
rm -rf "$work" && mkdir -p "$work"
git clone -q "$root" "$work/repo"
git -C "$work/repo" checkout -q -b docs

tokens="$work/tokens"
ci="$("$bin" token create --role ci --name ci --tokens "$tokens" 2>/dev/null)"
node="$("$bin" token create --role node --name docs-node --tokens "$tokens" 2>/dev/null)"

cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
pids=()
trap cleanup EXIT
"$bin" serve --address 127.0.0.1:0 --port_file "$work/port" --tokens "$tokens" --db "$pg" \
  >"$work/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -s "$work/port" ]] && break; sleep 0.1; done
server="127.0.0.1:$(cut -d' ' -f1 "$work/port")"
"$bin" node --server "$server" --token "$node" --name docs-node --workspace "$work/ws" \
  >"$work/node.log" 2>&1 &
pids+=($!)

for i in $(seq "$commits"); do
  echo "docs line $i" >>"$work/repo/runtime/README.md"
  git -C "$work/repo" -c user.name=ci -c user.email=ci@example.com commit -qam "docs: line $i"
  start=$(date +%s.%N)
  rc=0
  "$bin" submit --server "$server" --token "$ci" --repo "$work/repo" --baseline "docs~1" \
    --candidate docs --kind ci --wait >"$work/submit-$i.log" 2>&1 || rc=$?
  end=$(date +%s.%N)
  printf 'commit %d: %.1f s, exit %d: %s\n' "$i" "$(awk "BEGIN {print $end - $start}")" "$rc" \
    "$(grep -m1 -iE 'accept|reject|inconclusive' "$work/submit-$i.log" || tail -n1 "$work/submit-$i.log")"
done
