#!/usr/bin/env bash
# serve_bench end to end: a tiny run prints the JSON report and a trace;
# bad flags and bad values exit with code 2 and say what is wrong.
set -uo pipefail
bench=runtime/serve_bench
tiny=runtime/configs/tiny.json
out="${TEST_TMPDIR:-/tmp}"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$bench" --config="$tiny" --num_prompts=4 --input_len=20 --output_len=4 \
  --trace="$out/trace.json" --log_level=info >"$out/report.json" 2>"$out/log" \
  || fail "tiny run exited $?: $(cat "$out/log")"
grep -q '"output_throughput"' "$out/report.json" || fail "no throughput in report"
grep -q '"p99_itl_ms"' "$out/report.json" || fail "no ITL in report"
grep -q '"peak_attention_kv_bytes"' "$out/report.json" || fail "no memory in report"
grep -q '"decode_step"' "$out/trace.json" || fail "no decode_step span in trace"
grep -q 'event=engine_started' "$out/log" || fail "no structured log line"

# A pair compared over 3 rounds: every round's ratio is reported, and the
# headline ratio is their median.
"$bench" --config="$tiny" --num_prompts=3 --input_len=12 --output_len=3 \
  --compare=modes --rounds=3 >"$out/modes.json" 2>"$out/log" \
  || fail "compare run exited $?: $(cat "$out/log")"
python3 - "$out/modes.json" <<'PY' || fail "modes rounds: $(cat "$out/modes.json" | head -c 400)"
import json, statistics, sys
m = json.load(open(sys.argv[1]))["modes"]
rounds = m["epd_over_colocated_output_throughput_rounds"]
assert len(rounds) == 3 and all(r > 0 for r in rounds), rounds
assert m["epd_over_colocated_output_throughput"] == statistics.median(rounds), m
assert m["epd"]["config"]["engine"]["mode"] == "epd", m["epd"]["config"]
assert m["colocated"]["config"]["engine"]["mode"] == "colocated", m["colocated"]["config"]
# Equal threads (1 prefill + 1 decode vs 2 workers) and equal decode slots
# (one decode batch of 2 x 8 vs two batches of 8).
assert m["colocated"]["config"]["engine"]["colocated_workers"] == 2, m["colocated"]["config"]
assert m["colocated"]["config"]["engine"]["max_batch_size"] == 8, m["colocated"]["config"]
assert m["epd"]["config"]["engine"]["max_batch_size"] == 16, m["epd"]["config"]
assert m["epd_decode_batch_size"] == 16, m
PY

expect_usage_error() {
  local mention="$1"; shift
  "$bench" "$@" >/dev/null 2>"$out/err"
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$* exited $rc, want 2"
  grep -q -- "$mention" "$out/err" || fail "$* error does not mention $mention: $(cat "$out/err")"
}
expect_usage_error "--nonsense" --nonsense=1
expect_usage_error "fp4" --config="$tiny" --kv_format=fp4
expect_usage_error "--max_batch_size" --config="$tiny" --max_batch_size=-3
expect_usage_error "--rounds" --config="$tiny" --compare=modes --rounds=0
expect_usage_error "missing.json" --config=runtime/configs/missing.json
expect_usage_error "token_budget" --config="$tiny" --mode=colocated --token_budget=10
"$bench" --help | grep -q -- "--kda_precision" || fail "--help lacks flags"
echo PASS
