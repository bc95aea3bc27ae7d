#include "results/verdict/testing/verdicts.h"

#include <cstdlib>
#include <iostream>

#include "results/gate/gate.h"
#include "results/verdict/verdict.h"

namespace densegate::results::testing {

v1::Verdict VerdictWithoutSamples(const std::string& evaluation_id, v1::Policy policy,
                                  v1::Decision decision, const std::string& metric) {
  GateInput input;
  input.policy = policy;
  input.params = *ResolveGateParameters(v1::GatePolicy());
  if (decision == v1::REJECT) {
    v1::Reason& failed = input.stage_failures.emplace_back();
    failed.set_code(v1::CORRECTNESS_FAILED);
    failed.set_message("suite unit: 1 of 12 cases failed");
  } else {
    MetricSamples& m = input.metrics.emplace_back();
    m.name = metric;
    m.unit = "ns";
    m.direction = v1::LOWER_IS_BETTER;
    m.primary = true;
    m.inputs_identical = true;
  }
  absl::StatusOr<GateResult> result = Evaluate(input);
  if (!result.ok() || result->decision != decision) {
    std::cerr << "VerdictWithoutSamples: the gate does not decide "
              << v1::Decision_Name(decision) << " here\n";
    std::abort();
  }
  VerdictContext context;
  context.evaluation_id = evaluation_id;
  context.software_version = "test";
  return MakeVerdict(input, *result, context);
}

v1::Verdict VerdictFromSamples(const std::string& evaluation_id, v1::Policy policy,
                               const v1::GatePolicy& gate,
                               const std::vector<MetricSamples>& metrics,
                               absl::Span<const v1::Sample> samples, double error_share,
                               bool second_part) {
  GateInput input;
  input.policy = policy;
  absl::StatusOr<GateParameters> params = ResolveGateParameters(gate);
  absl::StatusOr<std::vector<MetricSamples>> paired = PairSamples(samples, metrics);
  if (!params.ok() || !paired.ok()) {
    std::cerr << "VerdictFromSamples: " << (params.ok() ? paired.status() : params.status())
              << "\n";
    std::abort();
  }
  input.params = PartParameters(*params, error_share, second_part);
  input.metrics = *std::move(paired);
  absl::StatusOr<GateResult> result = Evaluate(input);
  if (!result.ok() || result->needs_more_pairs) {
    std::cerr << "VerdictFromSamples: the gate decides nothing here\n";
    std::abort();
  }
  VerdictContext context;
  context.evaluation_id = evaluation_id;
  context.software_version = "test";
  return MakeVerdict(input, *result, context);
}

}  // namespace densegate::results::testing
