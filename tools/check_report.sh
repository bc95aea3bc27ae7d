#!/usr/bin/env bash
# Opens a densegate report.html in headless Chromium and fails unless it
# loaded without console errors, rendered something (a screenshot that is not
# blank), and the sections a demo run fills carry data: a timeline series
# with points, the precision chart with both curves, the rejections by reason,
# a bisection that named its culprit, and the nodes. The headline and the merge column must agree with
# report.json beside the page: cards and a "merged" candidate when the run
# merged one, the empty headline's sentence when it merged none (on a noisy
# machine a quick run can end with every expected accept inconclusive; cards
# drawn from merges are checked by //results/report:report_test).
#   tools/check_report.sh DIR/report.html   (writes report.png, dom.html beside it)
set -euo pipefail
page="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
dir="$(dirname "$page")"
profile="$(mktemp -d -t densegate-chromium.XXXXXX)"
trap 'rm -rf "$profile"' EXIT
flags=(--headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0
       --window-size=1200,4000 "--user-data-dir=$profile")
chromium "${flags[@]}" --screenshot="$dir/report.png" "file://$page" 2>"$dir/console.txt" >/dev/null
chromium "${flags[@]}" --dump-dom "file://$page" >"$dir/dom.html" 2>/dev/null

fail=0
check() {  # check WHAT PATTERN: the rendered DOM must contain PATTERN
  if grep -qE -- "$2" "$dir/dom.html"; then echo "  ok: $1"; else echo "  MISSING: $1 ($2)"; fail=1; fi
}
if grep -q CONSOLE "$dir/console.txt"; then
  echo "  console errors:"; grep CONSOLE "$dir/console.txt" | head -5; fail=1
else
  echo "  ok: no console errors"
fi
size=$(stat -c %s "$dir/report.png" 2>/dev/null || echo 0)
if (( size > 20000 )); then echo "  ok: screenshot $size bytes"; else echo "  BLANK: screenshot $size bytes"; fail=1; fi
merged=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(sum(c.get("merge") == "merged" for c in r["candidates"]))' "$dir/report.json") || {
  echo "  MISSING: a readable report.json beside the page"; merged=0; fail=1; }
if (( merged > 0 )); then
  check "headline cards ($merged merged in report.json)" 'class="card"'
  check "a merged candidate" '>merged<'
else
  check "the empty headline (none merged in report.json)" 'No candidate landed in this period'
fi
check "timeline series with points" 'class="series" points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+'
check "precision chart, baseline and candidate curves" 'class="series-b" points="[0-9.]+,[0-9.]+ '
check "rejected: precision" 'precision_failed \([0-9]+\)'
check "rejected: gaming" 'gaming \([0-9]+\)'
check "rejected: protected path" 'protected_path \([0-9]+\)'
check "rejected: correctness" 'correctness_failed \([0-9]+\)'
check "a bisection with its culprit" 'culprit <code>[0-9a-f]{12}</code>'
check "node health" '<td>node-a</td>'
exit $fail
