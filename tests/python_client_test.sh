#!/bin/bash
# The API from another language: a Python client generated at test time from
# proto/densegate.proto (Debian python3-grpcio + python3-grpc-tools) submits
# a candidate to a real `densegate serve`, watches it through a real
# `densegate node`, and checks the verdict.
set -euo pipefail
root="$TEST_SRCDIR/densegate"
work="$TEST_TMPDIR/py"
rm -rf "$work" && mkdir -p "$work/gen"
PY=/usr/bin/python3
if ! $PY -c 'import grpc, grpc_tools' 2>/dev/null; then
  echo "python3-grpcio / python3-grpc-tools missing (tools/bootstrap.sh --test installs them)" >&2
  exit 1
fi
$PY -m grpc_tools.protoc -I "$root/proto" -I /usr/include --python_out="$work/gen" \
  --grpc_python_out="$work/gen" "$root/proto/densegate.proto"

repo="$work/repo"
mkdir -p "$repo" && cp "$root"/tests/fixtures/tiny_workload/* "$repo/"
git -C "$repo" init -q
git -c user.name=t -c user.email=t@t -C "$repo" add -A
git -c user.name=t -c user.email=t@t -C "$repo" commit -qm baseline
sed -i '1i // comment only' "$repo/checksum.h"
git -c user.name=t -c user.email=t@t -C "$repo" commit -qam comment

densegate="$root/cli/densegate"
"$densegate" serve --address 127.0.0.1:0 --port_file "$work/port" --db "sqlite:$work/db" \
  --heartbeat_s 1 --max_calibration_noise 1 > "$work/serve.log" 2>&1 &
serve=$!
node=
cleanup() { kill -9 $serve ${node:-} 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 600); do [[ -s "$work/port" ]] && break; sleep 0.05; done
port=$(cat "$work/port")
"$densegate" node --server "127.0.0.1:$port" --name py-node --workspace "$work/ws" \
  > "$work/node.log" 2>&1 &
node=$!

cat > "$work/client.py" <<'PYEOF'
import sys
import grpc
import densegate_pb2 as pb
import densegate_pb2_grpc as rpc

address, repo = sys.argv[1], sys.argv[2]
stub = rpc.DensegateStub(grpc.insecure_channel(address))
resp = stub.Submit(pb.SubmitRequest(repo=repo, baseline_ref="HEAD~1", candidate_ref="HEAD",
                                    kind=pb.CI, hypothesis="comment only: no change"))
eid = resp.evaluation.id
stages = []
for event in stub.WatchEvaluation(pb.WatchEvaluationRequest(id=eid), timeout=300):
    if event.HasField("stage"):
        stages.append(pb.StageKind.Name(event.stage.kind))
evaluation = stub.GetEvaluation(pb.GetEvaluationRequest(id=eid))
decision = pb.Decision.Name(evaluation.verdict.decision)
print(eid, pb.EvaluationState.Name(evaluation.state), decision, stages)
assert evaluation.state == pb.FINISHED, evaluation.state
assert decision == "ACCEPT", decision
assert "MICROBENCHMARK" in stages, stages
try:
    stub.GetEvaluation(pb.GetEvaluationRequest(id="ev-missing"))
    raise AssertionError("an unknown id must be NOT_FOUND")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.NOT_FOUND, e.code()
PYEOF
PYTHONPATH="$work/gen" $PY "$work/client.py" "127.0.0.1:$port" "$repo"
echo "python client: OK"
