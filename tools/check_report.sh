#!/usr/bin/env bash
# Opens a densegate report.html in headless Chromium and fails unless it
# loaded without console errors, rendered something (a screenshot that is not
# blank), and the sections a demo run fills carry data: the headline cards,
# a timeline series with points, the precision chart with both curves, the
# rejections by reason, and the nodes.
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
check "headline cards" 'class="card"'
check "timeline series with points" 'class="series" points="[0-9.]+,[0-9.]+ [0-9.]+,[0-9.]+'
check "precision chart, baseline and candidate curves" 'class="series-b" points="[0-9.]+,[0-9.]+ '
check "a merged candidate" '>merged<'
check "rejected: precision" 'precision_failed \([0-9]+\)'
check "rejected: gaming" 'gaming \([0-9]+\)'
check "rejected: protected path" 'protected_path \([0-9]+\)'
check "rejected: correctness" 'correctness_failed \([0-9]+\)'
check "node health" '<td>node-a</td>'
exit $fail
