#!/bin/bash
# A/A noise of each benchmark metric, as one node measures it: `densegate
# eval` of a candidate whose binaries differ from the baseline's only by an
# .ident string in FILE (a C/C++ source linked into every benchmark), so
# that every benchmark is measured, RUNS times on CPU; then, per metric, the
# spread of the per-pair candidate/baseline ratios over all pairs (standard
# deviation of their logs, in percent) and the median ratio. Per run, how
# many pairs were measured again because the machine probe moved: a run with
# many met a slow or unsteady host phase. Every pair's ratio goes to
# WORK/ratios.tsv (metric, run, pair, ratio), for pooling several calls.
#
#   tools/aa_noise.sh DENSEGATE REPO BASELINE_REF FILE [RUNS] [CPU] [EVAL_FLAG...]
#
# EVAL_FLAGs go to `densegate eval` as they are (e.g. --unsafe_no_sandbox, to
# measure what the sandbox adds). AA_POLICY=gain judges each run under the
# gain policy, where an accept is a false accept (default no-regression);
# each run's exit code goes to WORK/decisions.tsv (0 accept, 1 reject, 3
# inconclusive, 4 infrastructure).
#
# To compare two builds of densegate (e.g. before and after a harness
# change), run it for each on the same repository, one after the other, on
# an otherwise idle machine. Each call works in a new temporary directory
# (printed), so neither reuses the other's workspace.
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
densegate=$(realpath "$1") repo=$2 base=$3 file=$4 runs=${5:-2} cpu=${6:-1}
policy=${AA_POLICY:-no-regression}
shift $(($# < 6 ? $# : 6))
work=$(mktemp -d /tmp/densegate-aa.XXXXXX)
echo "aa_noise: $densegate ($("$densegate" version | sed -n 2p | awk '{print $2}' | cut -c1-10)), work in $work" >&2
git clone -q "$repo" "$work/repo"
git -C "$work/repo" checkout -q -b aa "$base"
echo 'asm(".ident \"densegate a/a\"");' >> "$work/repo/$file"
git -C "$work/repo" -c user.name=aa -c user.email=aa@localhost commit -qam "a/a: equal code, other bytes"
for run in $(seq "$runs"); do
  echo "aa_noise: run $run of $runs" >&2
  mkdir -p "$work/out-$run"
  # Exit 3 (inconclusive) is an answer too; the samples are what counts.
  taskset -c "$cpu" "$densegate" eval --repo "$work/repo" --baseline "$base" --candidate aa \
    --policy "$policy" --workspace "$work/ws" --out "$work/out-$run" "$@" >"$work/eval-$run.log" 2>&1 || rc=$?
  printf '%d\t%s\t%d\n' "$run" "$policy" "${rc:-0}" >>"$work/decisions.tsv"
  unset rc
  test -s "$work/out-$run/samples.json" || { echo "run $run measured nothing: $work/eval-$run.log" >&2; exit 1; }
done
python3 - "$work" "$runs" <<'EOF'
import json, math, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
ratios = {}
tsv = open(f"{work}/ratios.tsv", "w")
for run in range(1, runs + 1):
    again = sum("measured again" in line for line in open(f"{work}/eval-{run}.log", errors="replace"))
    print(f"run {run}: {again} pairs measured again")
    pairs = {}
    for s in json.load(open(f"{work}/out-{run}/samples.json")):
        pairs.setdefault((s["metric"], s["pair"]), {})[s["arm"]] = s["value"]
    for (metric, pair), arms in pairs.items():
        if arms.get("baseline", 0) > 0 and arms.get("candidate", 0) > 0:
            ratio = arms["candidate"] / arms["baseline"]
            ratios.setdefault(metric, []).append(ratio)
            print(metric, run, pair, ratio, sep="\t", file=tsv)
print(f"{'metric':40} {'pairs':>5} {'A/A sd %':>9} {'median':>7}")
for metric, r in sorted(ratios.items()):
    logs = [math.log(x) for x in r]
    sd = statistics.stdev(logs) * 100 if len(logs) > 1 else float("nan")
    print(f"{metric:40} {len(r):5d} {sd:9.2f} {statistics.median(r):7.3f}")
EOF
