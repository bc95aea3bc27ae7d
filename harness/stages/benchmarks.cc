// The benchmark stage: its plan (benchmark_plan.cc), its ABBA loop of pairs
// and gate looks (benchmark_pairs.cc), the checks of what each run produced
// (benchmark_outputs.cc), and here the stage itself and its summary.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::Benchmarks() {
  BenchmarkPlan plan = ScopeBenchmarks();
  if (manifest_.benchmarks().empty() && plan.timed_checks.empty()) {
    Skip(v1::MICROBENCHMARK, "no benchmarks declared", listener_, &stages_);
    Skip(v1::END_TO_END, "no benchmarks declared", listener_, &stages_);
    return true;
  }
  // Both kinds run interleaved in one ABBA loop so that the gate sees every
  // metric at each look; the loop is recorded under the first stage kind.
  StageRun stage(plan.has_micro ? v1::MICROBENCHMARK : v1::END_TO_END, listener_, &stages_);
  PlanMeasurements(&plan);
  absl::StatusOr<bool> measured = MeasurePairs(plan, &stage);
  if (!measured.ok() || !*measured) return measured;
  if (std::optional<std::string> mismatch = PooledOutputMismatch()) {
    failures_.push_back(Reason(v1::OUTPUT_MISMATCH, v1::END_TO_END, *mismatch));
    stage.End(v1::STAGE_FAILED, *mismatch);
    return false;
  }
  bool regressed = false;
  for (const v1::Reason& r : gate_.reasons) regressed |= r.code() == v1::REGRESSION;
  std::string summary = BenchmarkSummary(plan);
  SummarizeCounters();
  const std::string traces = Traces();
  if (!traces.empty()) absl::StrAppend(&summary, "; ", traces);
  stage.End(regressed ? v1::STAGE_FAILED : v1::STAGE_PASSED, summary);
  if (plan.has_micro && plan.has_e2e) {
    StageRun e2e(v1::END_TO_END, nullptr, &stages_);
    e2e.End(stages_[stages_.size() - 2].status(),
            "interleaved with the microbenchmarks: " + summary);
  } else {
    Skip(plan.has_micro ? v1::END_TO_END : v1::MICROBENCHMARK, "none declared", listener_,
         &stages_);
  }
  return true;
}

std::string Evaluation::BenchmarkSummary(const BenchmarkPlan& plan) const {
  std::string summary =
      plan.nothing_to_measure
          ? absl::StrFormat("not measured, the inputs of every benchmark and timed check are "
                            "byte-identical in both arms (%s): %s",
                            absl::StrJoin(unchanged_, ", "), v1::Decision_Name(gate_.decision))
          : absl::StrFormat("%d pairs, ABBA, fresh process each: %s", gate_.pairs_used,
                            v1::Decision_Name(gate_.decision));
  if (!plan.nothing_to_measure && !unchanged_.empty()) {
    absl::StrAppend(&summary, "; not measured, inputs byte-identical in both arms: ",
                    absl::StrJoin(unchanged_, ", "));
  }
  if (!plan.prior_note.empty()) absl::StrAppend(&summary, "; ", plan.prior_note);
  for (const auto& [benchmark, pooled] : agreement_) {
    absl::StrAppend(&summary, "; ", benchmark,
                    pooled.identical
                        ? ": generated tokens identical in both arms, every pair"
                        : absl::StrFormat(": %.1f%% of %d generated tokens agree with the "
                                          "baseline's (declared precision change: %s)",
                                          100 * pooled.agreement, pooled.tokens,
                                          request_.precision_change));
  }
  if (!request_.metric_scope.empty()) {
    absl::StrAppend(
        &summary, "; scoped to ", absl::StrJoin(request_.metric_scope, ", "),
        plan.out_of_scope.empty() ? "" : ", not run: " + absl::StrJoin(plan.out_of_scope, ", "));
  }
  if (loop_.remeasured > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) measured again: the machine probe's time moved more "
                          "than %.2fx within the pair",
                          loop_.remeasured, options_.max_probe_spread);
  }
  if (host_.seconds_waited() > 0) {
    absl::StrAppendFormat(&summary, "; %.0f s waited for the host to settle (probe %.1f-%.1f ms)",
                          host_.seconds_waited(), host_.probe_fastest_ms(),
                          host_.probe_slowest_ms());
  }
  if (loop_.kept_unsteady > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) kept although it moved (a re-measure bound spent: %d "
                          "in a row, %d per evaluation, %.0f s)",
                          loop_.kept_unsteady, options_.max_remeasures_in_a_row,
                          gate_input_.params.max_pairs, options_.max_unsteady_seconds);
  }
  return summary;
}

}  // namespace densegate::harness::internal
