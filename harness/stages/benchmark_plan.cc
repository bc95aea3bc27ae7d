// The benchmark stage's plan, made before its first pair: the metrics it
// measures, what it leaves out (out of the request's scope, or inputs
// byte-identical in both arms), how many runs per arm each benchmark takes
// on this node, and the pairs a re-measure takes from its prior evaluation.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

Evaluation::BenchmarkPlan Evaluation::ScopeBenchmarks() {
  BenchmarkPlan plan;
  for (const v1::KernelCheck& c : manifest_.kernel_checks()) {
    if (!c.metric().empty() && InScope(c.metric())) plan.timed_checks.push_back(&c);
  }
  // Every benchmark's metrics (indexed by (benchmark, metric) below), then
  // the timed checks' in scope, in timed_checks' order.
  std::set<std::string> timed_out_of_scope;
  for (const v1::KernelCheck& c : manifest_.kernel_checks()) {
    if (!c.metric().empty() && !InScope(c.metric())) timed_out_of_scope.insert(c.metric());
  }
  for (MetricSamples& s : results::ManifestMetrics(manifest_)) {
    if (timed_out_of_scope.count(s.name) == 0) metrics_.push_back(std::move(s));
  }
  plan.has_micro = !plan.timed_checks.empty();
  // Benchmarks producing no metric of the request's scope are not run.
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (!InScope(b)) {
      plan.out_of_scope.push_back(b.name());
      continue;
    }
    (b.kind() == v1::GOOGLE_BENCHMARK ? plan.has_micro : plan.has_e2e) = true;
  }
  return plan;
}

void Evaluation::PlanMeasurements(BenchmarkPlan* plan) {
  FindUnchangedBenchmarks();
  const bool benchmarks_unchanged = unchanged_.size() + plan->out_of_scope.size() ==
                                    static_cast<size_t>(manifest_.benchmarks_size());
  const size_t unchanged_checks = FindUnchangedTimedChecks(plan->timed_checks);
  plan->nothing_to_measure = benchmarks_unchanged && unchanged_checks == plan->timed_checks.size();
  // A noisy node measures its end-to-end samples more precisely, never
  // with wider bounds (EndToEndRunsPerArm). The extra runs are for guards:
  // a benchmark whose every metric carries a claim is decided by its
  // claims, and runs once.
  const int runs_per_arm = EndToEndRunsPerArm(request_.node_noise);
  std::set<std::string> claimed;
  for (const v1::Claim& c : request_.claims) claimed.insert(c.metric());
  std::vector<std::string> repeated;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const bool guards =
        b.kind() == v1::JSON_COMMAND &&
        std::any_of(b.metrics().begin(), b.metrics().end(),
                    [&](const v1::MetricSpec& m) { return claimed.count(m.name()) == 0; });
    const int runs = guards ? runs_per_arm : 1;
    plan->runs_per_arm[b.name()] = runs;
    if (InScope(b) && !unchanged_.count(b.name()) && runs > 1) repeated.push_back(b.name());
  }
  host_.set_node_noise(request_.node_noise);
  host_.set_end_to_end_runs_per_arm(repeated.empty() ? 1 : runs_per_arm);
  if (!repeated.empty()) {
    Say(v1::END_TO_END,
        absl::StrFormat("node calibrated at %.2f%% noise (quiet: %.1f%%): %s runs %d times "
                        "per arm and pair, its sample their geometric mean",
                        100 * request_.node_noise, 100 * kQuietNodeNoise,
                        absl::StrJoin(repeated, ", "), runs_per_arm));
  }
  if (plan->nothing_to_measure) return;
  TakePriorSamples(&plan->prior_note);
  if (request_.error_share > 0 && request_.error_share < 1) {
    Say(v1::MICROBENCHMARK,
        request_.continues.empty()
            ? absl::StrFormat("spends %.0f%% of the manifest's error budget; the rest is kept "
                              "for a second part should noise leave it inconclusive",
                              100 * request_.error_share)
            : absl::StrFormat("second part of %s: spends the %.0f%% of the error budget it "
                              "kept, looks at %d to %d pairs, pooled with its pairs",
                              request_.continues, 100 * request_.error_share,
                              gate_input_.params.min_pairs, gate_input_.params.max_pairs));
  }
  // The metric the per-pair progress line shows: the first one measured,
  // preferring one whose pairs are not taken from a prior.
  std::vector<bool> taken_from_prior(metrics_.size(), false);
  for (size_t b = 0, i = 0; b < static_cast<size_t>(manifest_.benchmarks_size()); ++b) {
    const v1::BenchmarkSpec& spec = manifest_.benchmarks(b);
    for (int j = 0; j < spec.metrics_size(); ++j, ++i) {
      taken_from_prior[i] = carried_pairs_.count(spec.name()) > 0;
    }
  }
  auto first_measured = [&](bool here) {
    for (size_t i = 0; i < metrics_.size(); ++i) {
      const MetricSamples& m = metrics_[i];
      if (!m.inputs_identical && InScope(m.name) && !(here && taken_from_prior[i])) return i;
    }
    return metrics_.size();
  };
  plan->shown_metric =
      first_measured(true) < metrics_.size() ? first_measured(true) : first_measured(false);
}

size_t Evaluation::FindUnchangedTimedChecks(const std::vector<const v1::KernelCheck*>& checks) {
  // A timed check whose runner (with its runfiles) the candidate left
  // byte-identical would time the baseline's program twice on the harness's
  // inputs: its metric is exactly unchanged, as a benchmark's is.
  size_t unchanged = 0;
  for (size_t i = 0, index = metrics_.size() - checks.size(); i < checks.size(); ++i, ++index) {
    v1::BenchmarkSpec runner;
    runner.set_command(checks[i]->runner());
    const absl::StatusOr<std::string> baseline =
        BenchmarkInputsDigest(runner, checkout_.baseline_dir);
    const absl::StatusOr<std::string> candidate =
        BenchmarkInputsDigest(runner, checkout_.candidate_dir);
    if (!baseline.ok() || !candidate.ok() || *baseline != *candidate) continue;
    metrics_[index].inputs_identical = true;
    unchanged_.insert(checks[i]->name());
    ++unchanged;
    Say(v1::MICROBENCHMARK,
        absl::StrFormat("%s: not measured, its runner is byte-identical in both arms",
                        checks[i]->name()));
  }
  return unchanged;
}

void Evaluation::FindUnchangedBenchmarks() {
  size_t first_metric = 0;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const size_t metrics = b.metrics_size();
    first_metric += metrics;
    if (!InScope(b)) continue;
    if (!SkipsWhenIdentical(b)) {
      // Unset, yet not comparable: say why it is measured.
      if (!b.has_skip_when_identical()) {
        Say(v1::MICROBENCHMARK, absl::StrFormat("%s: measured, %s", b.name(),
                                                InputIdentityProblem(b).value_or("")));
      }
      continue;
    }
    absl::StatusOr<std::string> baseline = BenchmarkInputsDigest(b, checkout_.baseline_dir);
    absl::StatusOr<std::string> candidate = BenchmarkInputsDigest(b, checkout_.candidate_dir);
    if (baseline.ok() && candidate.ok()) {
      v1::BenchmarkInputs& digests = benchmark_inputs_.emplace_back();
      digests.set_benchmark(b.name());
      digests.set_baseline_digest(*baseline);
      digests.set_candidate_digest(*candidate);
    }
    absl::StatusOr<InputComparison> inputs =
        CompareBenchmarkInputs(b, checkout_.baseline_dir, checkout_.candidate_dir);
    std::string message;
    if (!inputs.ok()) {
      message = absl::StrFormat("%s: measured, its inputs could not be compared: %s", b.name(),
                                inputs.status().message());
    } else if (!inputs->identical) {
      message = absl::StrFormat("%s: measured, its inputs differ (%s)", b.name(),
                                inputs->difference);
    } else {
      message = absl::StrFormat(
          "%s: not measured, its inputs are byte-identical in both arms (%d files, %.1f MiB)",
          b.name(), inputs->files, inputs->bytes / 1048576.0);
      unchanged_.insert(b.name());
      for (size_t i = first_metric - metrics; i < first_metric; ++i) {
        metrics_[i].inputs_identical = true;
      }
    }
    Say(v1::MICROBENCHMARK, message);
  }
}

void Evaluation::TakePriorSamples(std::string* note) {
  const v1::PriorMeasurement& prior = request_.prior;
  if (prior.evaluation_id().empty()) return;
  if (prior.node_fingerprint() != options_.node_fingerprint) {
    // Another kind of machine (or toolchain): its samples do not pair with ours.
    *note = absl::StrFormat("measured anew: evaluation %s ran on another kind of node",
                            prior.evaluation_id());
    return;
  }
  auto digests_of = [](const auto& list, const std::string& benchmark) {
    const auto it = std::find_if(list.begin(), list.end(), [&](const v1::BenchmarkInputs& d) {
      return d.benchmark() == benchmark;
    });
    return it == list.end() ? nullptr : &*it;
  };
  std::vector<std::string> taken, anew, undigested;
  size_t first_metric = 0;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const size_t index = first_metric;
    first_metric += b.metrics_size();
    if (!InScope(b) || unchanged_.count(b.name()) > 0) continue;
    const v1::BenchmarkInputs* ours = digests_of(benchmark_inputs_, b.name());
    const v1::BenchmarkInputs* theirs = digests_of(prior.benchmark_inputs(), b.name());
    if (ours == nullptr || theirs == nullptr) {
      undigested.push_back(b.name());
      continue;
    }
    if (ours->baseline_digest() != theirs->baseline_digest() ||
        ours->candidate_digest() != theirs->candidate_digest()) {
      anew.push_back(b.name());
      continue;
    }
    // Metric index -> pair -> (baseline, candidate), for this benchmark.
    std::map<size_t, std::map<int, std::pair<const v1::Sample*, const v1::Sample*>>> by_metric;
    for (int i = 0; i < b.metrics_size(); ++i) {
      if (InScope(b.metrics(i).name())) by_metric[index + i];
    }
    for (const v1::Sample& s : prior.samples()) {
      if (s.pair_index() < 0 || (s.arm() != v1::BASELINE && s.arm() != v1::CANDIDATE)) continue;
      for (auto& [metric, pairs] : by_metric) {
        if (metrics_[metric].name != s.metric()) continue;
        auto& slot = pairs[s.pair_index()];
        (s.arm() == v1::BASELINE ? slot.first : slot.second) = &s;
      }
    }
    auto complete = [&](int pair) {
      for (const auto& [metric, pairs] : by_metric) {
        const auto it = pairs.find(pair);
        if (it == pairs.end() || it->second.first == nullptr || it->second.second == nullptr) {
          return false;
        }
      }
      return true;
    };
    int n = 0;
    while (complete(n)) ++n;
    if (n == 0) {
      anew.push_back(b.name());
      continue;
    }
    // The gate's values by pair index; the samples in the prior's
    // measurement order (pair by pair, ABBA).
    std::set<const v1::Sample*> kept;
    for (const auto& [metric, pairs] : by_metric) {
      MetricSamples& m = metrics_[metric];
      for (int pair = 0; pair < n; ++pair) {
        const auto& [baseline, candidate] = pairs.at(pair);
        m.baseline.push_back(baseline->value());
        m.candidate.push_back(candidate->value());
        kept.insert(baseline);
        kept.insert(candidate);
      }
    }
    for (const v1::Sample& s : prior.samples()) {
      if (kept.count(&s) == 0) continue;
      // This evaluation's sample now, with the prior's value and timings.
      v1::Sample& copy = samples_.emplace_back(s);
      copy.set_id(next_sample_id_++);
      copy.clear_evaluation_id();
      copy.clear_recorded_at();
    }
    carried_pairs_[b.name()] = n;
    taken.push_back(absl::StrFormat("%d pairs of %s", n, b.name()));
  }
  std::vector<std::string> parts;
  if (!taken.empty()) {
    parts.push_back(
        absl::StrFormat("%s taken from evaluation %s (the same inputs, arm for arm, "
                        "as there)",
                        absl::StrJoin(taken, ", "), prior.evaluation_id()));
  }
  if (!anew.empty()) {
    parts.push_back(absl::StrFormat("measured anew: %s (other inputs than in evaluation %s)",
                                    absl::StrJoin(anew, ", "), prior.evaluation_id()));
  }
  if (!undigested.empty()) {
    parts.push_back(absl::StrFormat("measured anew: %s (no input digest to compare)",
                                    absl::StrJoin(undigested, ", ")));
  }
  if (parts.empty()) return;
  *note = absl::StrJoin(parts, "; ");
  Say(v1::MICROBENCHMARK, *note);
}

}  // namespace densegate::harness::internal
