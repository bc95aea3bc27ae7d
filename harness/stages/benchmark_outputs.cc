// What one benchmark run produced: its metric values (a Google Benchmark's
// times checked to be real), and what it generated, compared with the
// baseline's same run (OutputCheck) pair by pair or, under a declared
// precision change, pooled over all pairs.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

std::vector<double> Evaluation::MeasuredValues(const v1::BenchmarkSpec& b, bool candidate,
                                               const std::string& arm, int pair, int run,
                                               const std::string& pair_seed,
                                               const std::string& name, const platform::ProcessResult& r,
                                               StageRun* stage) {
  std::string out = platform::ReadOutputFile(LogPath(name + ".out"));
  auto fail = [&](v1::ReasonCode code, std::string message) {
    message = absl::StrFormat("%s benchmark %s (%s, pair %d): %s", arm, b.name(),
                              b.command(), pair, message);
    if (!candidate) {
      infrastructure_ = absl::FailedPreconditionError(message);
      stage->End(v1::STAGE_ERROR, message);
    } else {
      failures_.push_back(Reason(code, stage->stage().kind(), message));
      stage->End(v1::STAGE_FAILED, message);
    }
  };
  if (!r.ok()) {
    fail(v1::CORRECTNESS_FAILED,
         absl::StrCat(r.Describe(), "\n",
                      LastLines(platform::ReadOutputFile(LogPath(name + ".err")), 6)));
    return {};
  }
  std::vector<double> values;
  if (b.kind() == v1::GOOGLE_BENCHMARK) {
    absl::StatusOr<std::vector<BenchmarkRun>> runs = ParseGoogleBenchmarkJson(out);
    if (absl::IsFailedPrecondition(runs.status())) {
      // The benchmark checked what it timed and found it wrong, yet
      // the tests passed: the code behaves differently when measured.
      fail(v1::GAMING,
           absl::StrCat(runs.status().message(),
                        "; the correctness stage passed, so the candidate takes a "
                        "different path when it is benchmarked"));
      return {};
    }
    if (!runs.ok()) {
      fail(v1::CORRECTNESS_FAILED, std::string(runs.status().message()));
      return {};
    }
    double claimed = ClaimedTimedSeconds(*runs);
    if (claimed > r.wall_seconds) {
      fail(v1::GAMING,
           absl::StrFormat("reports %.3f s of timed work in a process that lived "
                           "%.3f s by the harness's clock: its times are not real",
                           claimed, r.wall_seconds));
      return {};
    }
    for (const v1::MetricSpec& m : b.metrics()) {
      absl::StatusOr<double> v = GoogleBenchmarkMetric(*runs, m);
      if (!v.ok()) {
        fail(v1::CORRECTNESS_FAILED, std::string(v.status().message()));
        return {};
      }
      values.push_back(*v);
    }
  } else {
    for (const v1::MetricSpec& m : b.metrics()) {
      absl::StatusOr<double> v = JsonNumberAt(out, m.source());
      if (!v.ok() || !(*v > 0) || !std::isfinite(*v)) {
        fail(v1::CORRECTNESS_FAILED,
             v.ok()
                 ? absl::StrFormat("%s = %g is not a positive number", m.source(), *v)
                 : std::string(v.status().message()));
        return {};
      }
      values.push_back(*v);
    }
    if (b.has_outputs()) {
      absl::StatusOr<GeneratedTokens> tokens =
          JsonTokenSequencesAt(out, b.outputs().source());
      if (!tokens.ok()) {
        fail(v1::CORRECTNESS_FAILED, std::string(tokens.status().message()));
        return {};
      }
      if (std::optional<std::string> mismatch =
              OutputMismatch(b, candidate, pair, run, *std::move(tokens))) {
        const std::string message = absl::StrFormat(
            "candidate benchmark %s (pair %d, prompts from seed %s): %s", b.name(),
            pair, pair_seed, *mismatch);
        failures_.push_back(Reason(v1::OUTPUT_MISMATCH, v1::END_TO_END, message));
        stage->End(v1::STAGE_FAILED, message);
        return {};
      }
    }
    if (!b.counters().empty()) {
      // Explanatory only: a missing counters object costs the
      // attribution, not the verdict.
      absl::StatusOr<std::map<std::string, double>> counters =
          JsonNumbersAt(out, b.counters());
      for (const auto& [counter, value] :
           counters.ok() ? *counters : std::map<std::string, double>{}) {
        auto& arms = counter_samples_[b.name()][counter];
        (candidate ? arms.second : arms.first).push_back(value);
      }
    }
  }
  return values;
}

std::optional<std::string> Evaluation::OutputMismatch(const v1::BenchmarkSpec& b, bool candidate,
                                                      int pair, int run, GeneratedTokens tokens) {
  generated_[candidate][{b.name(), pair, run}] = std::move(tokens);
  const auto baseline = generated_[0].find({b.name(), pair, run});
  const auto subject = generated_[1].find({b.name(), pair, run});
  if (baseline == generated_[0].end() || subject == generated_[1].end()) return std::nullopt;
  const OutputComparison c = CompareGeneratedOutputs(baseline->second, subject->second);
  Pool(c, &agreement_[b.name()]);
  // A declared precision change is judged on all pairs together, once the
  // gate has decided (PooledOutputMismatch); anything else in every pair.
  std::string why;
  if (!request_.precision_change.empty() || OutputsAcceptable(c, false, 0, &why)) {
    return std::nullopt;
  }
  return why;
}

std::optional<std::string> Evaluation::PooledOutputMismatch() const {
  if (request_.precision_change.empty()) return std::nullopt;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const auto pooled = agreement_.find(b.name());
    if (pooled == agreement_.end()) continue;
    std::string why;
    if (!OutputsAcceptable(pooled->second, true, b.outputs().min_token_agreement(), &why)) {
      return absl::StrFormat("candidate benchmark %s, over all pairs: %s", b.name(), why);
    }
  }
  return std::nullopt;
}

}  // namespace densegate::harness::internal
