// The benchmark stage: which benchmarks to measure, prior samples, and the
// ABBA loop of pairs with machine-probe re-measures and the gate's looks.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::Benchmarks() {
  std::vector<const v1::KernelCheck*> timed_checks;
  for (const v1::KernelCheck& c : manifest_.kernel_checks()) {
    if (!c.metric().empty() && InScope(c.metric())) timed_checks.push_back(&c);
  }
  if (manifest_.benchmarks().empty() && timed_checks.empty()) {
    Skip(v1::MICROBENCHMARK, "no benchmarks declared", listener_, &stages_);
    Skip(v1::END_TO_END, "no benchmarks declared", listener_, &stages_);
    return true;
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
  bool has_micro = !timed_checks.empty(), has_e2e = false;
  // Benchmarks producing no metric of the request's scope are not run.
  std::vector<std::string> out_of_scope;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (!InScope(b)) {
      out_of_scope.push_back(b.name());
      continue;
    }
    (b.kind() == v1::GOOGLE_BENCHMARK ? has_micro : has_e2e) = true;
  }
  // Both kinds run interleaved in one ABBA loop so that the gate sees every
  // metric at each look; the loop is recorded under the first stage kind.
  StageRun micro(has_micro ? v1::MICROBENCHMARK : v1::END_TO_END, listener_, &stages_);
  FindUnchangedBenchmarks();
  const bool benchmarks_unchanged =
      unchanged_.size() + out_of_scope.size() == static_cast<size_t>(manifest_.benchmarks_size());
  // A timed check whose runner (with its runfiles) the candidate left
  // byte-identical would time the baseline's program twice on the harness's
  // inputs: its metric is exactly unchanged, as a benchmark's is.
  size_t unchanged_checks = 0;
  for (size_t i = 0, index = metrics_.size() - timed_checks.size(); i < timed_checks.size();
       ++i, ++index) {
    v1::BenchmarkSpec runner;
    runner.set_command(timed_checks[i]->runner());
    const absl::StatusOr<std::string> baseline =
        BenchmarkInputsDigest(runner, checkout_.baseline_dir);
    const absl::StatusOr<std::string> candidate =
        BenchmarkInputsDigest(runner, checkout_.candidate_dir);
    if (!baseline.ok() || !candidate.ok() || *baseline != *candidate) continue;
    metrics_[index].inputs_identical = true;
    unchanged_.insert(timed_checks[i]->name());
    ++unchanged_checks;
    Say(v1::MICROBENCHMARK,
        absl::StrFormat("%s: not measured, its runner is byte-identical in both arms",
                        timed_checks[i]->name()));
  }
  const bool nothing_to_measure = benchmarks_unchanged && unchanged_checks == timed_checks.size();
  // A noisy node measures its end-to-end samples more precisely, never
  // with wider bounds (EndToEndRunsPerArm). The extra runs are for guards:
  // a benchmark whose every metric carries a claim is decided by its
  // claims, and runs once.
  const int runs_per_arm = EndToEndRunsPerArm(request_.node_noise);
  std::set<std::string> claimed;
  for (const v1::Claim& c : request_.claims) claimed.insert(c.metric());
  auto runs_of = [&](const v1::BenchmarkSpec& b) {
    if (b.kind() != v1::JSON_COMMAND) return 1;
    for (const v1::MetricSpec& m : b.metrics()) {
      if (claimed.count(m.name()) == 0) return runs_per_arm;
    }
    return 1;
  };
  std::vector<std::string> repeated;
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    if (InScope(b) && !unchanged_.count(b.name()) && runs_of(b) > 1) repeated.push_back(b.name());
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
  int pairs = 0;
  int target = nothing_to_measure ? 0 : results::PlanLooks(gate_input_.params).pairs.front();
  int64_t next_sample_id = 1;
  std::string prior_note;
  if (!nothing_to_measure) TakePriorSamples(&next_sample_id, &prior_note);
  if (!nothing_to_measure && request_.error_share > 0 && request_.error_share < 1) {
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
  auto measured_metric = [&](bool here) {
    for (size_t i = 0; i < metrics_.size(); ++i) {
      const MetricSamples& m = metrics_[i];
      if (!m.inputs_identical && InScope(m.name) && !(here && taken_from_prior[i])) {
        return metrics_.begin() + i;
      }
    }
    return metrics_.end();
  };
  const auto shown = measured_metric(true) != metrics_.end() ? measured_metric(true)
                                                              : measured_metric(false);
  // Pairs measured again because the machine probe moved during them, and
  // pairs kept although it did (once a re-measure bound was spent).
  int remeasured = 0, kept_unsteady = 0;
  // Seconds of dropped runs and of waits for the host to settle, and the
  // unsteady measurements since the last steady one.
  double unsteady_seconds = 0;
  int unsteady_in_a_row = 0;
  MachineProbe* probe = options_.machine_probe;
  if (probe != nullptr) probe->Seconds();  // Warms its array; not used.
  auto read_probe = [&] {
    const double seconds = probe->Seconds();
    const double ms = 1e3 * seconds;
    if (host_.probe_reads() == 0 || ms < host_.probe_fastest_ms()) host_.set_probe_fastest_ms(ms);
    host_.set_probe_slowest_ms(std::max(host_.probe_slowest_ms(), ms));
    host_.set_probe_reads(host_.probe_reads() + 1);
    return seconds;
  };
  auto say_unsteady = [&](const std::string& message) {
    if (!listener_) return;
    v1::Progress p;
    p.set_stage(v1::MICROBENCHMARK);
    p.set_repetition(pairs);
    p.set_repetitions_planned(target);
    p.set_message(message);
    listener_->OnProgress(p);
  };
  // Waits up to `seconds` for the host to settle: reads the probe once a
  // second and returns early once three reads in a row agree within
  // max_probe_spread. Returns the seconds waited.
  auto wait_for_steady_host = [&](double seconds, double fastest, double slowest) {
    say_unsteady(absl::StrFormat(
        "host unsteady: waiting up to %.0f s, probe %.1f-%.1f ms vs %.1f ms calm", seconds,
        1e3 * fastest, 1e3 * slowest, host_.probe_fastest_ms()));
    std::deque<double> last;
    double waited = 0;
    while (waited < seconds && !(listener_ != nullptr && listener_->Cancelled())) {
      probe->Pause(absl::Seconds(1));
      waited += 1;
      last.push_back(read_probe());
      if (last.size() > 3) last.pop_front();
      if (last.size() == 3 &&
          *std::max_element(last.begin(), last.end()) <=
              *std::min_element(last.begin(), last.end()) * options_.max_probe_spread) {
        break;
      }
    }
    return waited;
  };
  // What a benchmark's two runs of a pair add, so that they can be taken
  // back (see EvaluatorOptions::machine_probe).
  struct Added {
    std::vector<MetricSamples> metrics;
    size_t samples;
    decltype(counter_samples_) counters;
    decltype(agreement_) agreement;
    int64_t next_id;
  };
  auto before_runs = [&] {
    return Added{metrics_, samples_.size(), counter_samples_, agreement_, next_sample_id};
  };
  // True when the runs of pair `pairs` since `before` (`tries` of them so
  // far, taking `run_seconds`) are to be measured again: the probe moved
  // more than max_probe_spread within them and no re-measure bound is
  // spent. Then they are taken back, and the host given time to settle.
  auto measure_again = [&](const Added& before, const std::vector<double>& probe_seconds,
                           const std::string& benchmark, int tries, double run_seconds) {
    if (probe_seconds.empty()) return false;
    const auto [fastest, slowest] = std::minmax_element(probe_seconds.begin(), probe_seconds.end());
    if (*slowest <= *fastest * options_.max_probe_spread) {
      unsteady_in_a_row = 0;
      return false;
    }
    ++unsteady_in_a_row;
    if (remeasured >= gate_input_.params.max_pairs || tries > options_.max_remeasures_in_a_row ||
        unsteady_seconds + run_seconds > options_.max_unsteady_seconds) {
      ++kept_unsteady;
      host_.set_pairs_kept_unsteady(kept_unsteady);
      return false;
    }
    ++remeasured;
    host_.set_pairs_measured_again(remeasured);
    unsteady_seconds += run_seconds;
    say_unsteady(absl::StrFormat(
        "%s, pair %d measured again: the machine probe took %.2f-%.2f ms within it", benchmark,
        pairs + 1, 1e3 * *fastest, 1e3 * *slowest));
    metrics_ = before.metrics;
    samples_.resize(before.samples);
    counter_samples_ = before.counters;
    // Both arms' outputs of the pair are generated again, and compared once.
    agreement_ = before.agreement;
    for (auto& arm : generated_) {
      for (int run = 0; run < runs_per_arm; ++run) arm.erase({benchmark, pairs, run});
    }
    next_sample_id = before.next_id;
    // Backoff: 5 s after the first unsteady measurement, doubling with each
    // one in a row (across pairs), capped at a minute and at what is left
    // of the evaluation's unsteady budget.
    const double wait = std::min(
        {options_.first_unsteady_wait_seconds * std::pow(2.0, std::min(unsteady_in_a_row, 8) - 1),
         60.0, options_.max_unsteady_seconds - unsteady_seconds});
    if (wait >= 1) {
      const double waited = wait_for_steady_host(wait, *fastest, *slowest);
      unsteady_seconds += waited;
      host_.set_seconds_waited(host_.seconds_waited() + waited);
    }
    return true;
  };
  // Runs `run_arm` for both arms of one benchmark of pair `pairs` (ABBA: even
  // pairs the baseline first), back to back under one hold of the host lock
  // (the machine to themselves), so that a slow spell of the host lasting
  // seconds meets both arms, not one (arm by arm, with two nodes taking
  // turns, they were ~10 s apart). With several runs per arm the arms
  // alternate run by run, each run in the other order from the last (B C C B
  // B C ...): repeats in one arm back to back left a drift of the host's
  // speed between the arms in every sample (docs/measurements/noise.md). The
  // probe runs before each arm's first run and after the last; the pair is
  // measured again while measure_again says so. run_arm returns false to end
  // the stage (it recorded why).
  auto measure_both_arms =
      [&](const std::string& benchmark, int runs,
          absl::FunctionRef<absl::StatusOr<bool>(bool candidate, const std::string& arm, int run)>
              run_arm) -> absl::StatusOr<bool> {
    for (int tries = 1;; ++tries) {
      const Added before = before_runs();
      const absl::Time started = absl::Now();
      std::vector<double> probe_seconds;
      {
        HostLock::Guard measuring(options_.host_lock, HostLock::Mode::kExclusive);
        for (int run = 0; run < runs; ++run) {
          for (int turn = 0; turn < 2; ++turn) {
            const bool candidate = ((pairs + run) % 2 == 0) == (turn == 1);
            if (probe != nullptr && run == 0) probe_seconds.push_back(read_probe());
            absl::StatusOr<bool> ok = run_arm(candidate, candidate ? "candidate" : "baseline", run);
            if (!ok.ok() || !*ok) return ok;
          }
        }
        if (probe != nullptr) probe_seconds.push_back(read_probe());
      }
      if (!measure_again(before, probe_seconds, benchmark, tries,
                         absl::ToDoubleSeconds(absl::Now() - started))) {
        return true;
      }
    }
  };
  while (true) {
    for (; pairs < target; ++pairs) {
      if (listener_ != nullptr && listener_->Cancelled()) {
        infrastructure_ = absl::CancelledError("the evaluation was cancelled");
        micro.End(v1::STAGE_CANCELLED, "cancelled");
        return false;
      }
      size_t first_metric = 0;
      // The prompts of this pair's serving runs: drawn here, the same for
      // both arms, unknown to any build (OutputCheck).
      const std::string pair_seed = PromptSeed();
      for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
        const auto carried = carried_pairs_.find(b.name());
        if (unchanged_.count(b.name()) || !InScope(b) ||
            (carried != carried_pairs_.end() && pairs < carried->second)) {
          first_metric += b.metrics_size();
          continue;
        }
        const int runs = runs_of(b);
        // Per arm (baseline, candidate) and metric, the log of each run's
        // value: the sample is their geometric mean (EndToEndRunsPerArm).
        std::vector<double> log_sum[2];
        double wall_seconds[2] = {0, 0}, cpu_seconds[2] = {0, 0};
        absl::StatusOr<bool> measured = measure_both_arms(
            b.name(), runs,
            [&](bool candidate, const std::string& arm, int run) -> absl::StatusOr<bool> {
              if (run == 0) {  // Also when the pair is measured again.
                log_sum[candidate].assign(b.metrics_size(), 0);
                wall_seconds[candidate] = cpu_seconds[candidate] = 0;
              }
              std::string command =
                  absl::StrReplaceAll(b.command(), {{kSeedPlaceholder, pair_seed}});
              if (b.kind() == v1::GOOGLE_BENCHMARK) command += " --benchmark_format=json";
              std::string name = absl::StrFormat("bench-%s-%s-%d", b.name(), arm, pairs);
              if (run > 0) absl::StrAppend(&name, "-run", run + 1);
              absl::StatusOr<ProcessResult> r = Shell(command, candidate, name, b.timeout_s(),
                                                      ArmSandbox(candidate, Access::kMeasure));
              if (!r.ok()) return r.status();
              wall_seconds[candidate] += r->wall_seconds;
              cpu_seconds[candidate] += r->user_seconds + r->system_seconds;
              const std::vector<double> run_values =
                  MeasuredValues(b, candidate, arm, pairs, run, pair_seed, name, *r, &micro);
              if (run_values.empty()) return false;  // MeasuredValues recorded why.
              for (size_t i = 0; i < run_values.size(); ++i) {
                log_sum[candidate][i] += std::log(run_values[i]);
              }
              if (run + 1 < runs) return true;
              size_t metric_index = first_metric;
              for (size_t i = 0; i < run_values.size(); ++i, ++metric_index) {
                const double value = std::exp(log_sum[candidate][i] / runs);
                MetricSamples& s = metrics_[metric_index];
                // Kept out of the samples too, so that recompute sees what the gate saw.
                if (!InScope(s.name)) continue;
                (candidate ? s.candidate : s.baseline).push_back(value);
                v1::Sample sample;
                sample.set_id(next_sample_id++);
                sample.set_metric(s.name);
                sample.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
                sample.set_pair_index(pairs);
                sample.set_value(value);
                sample.set_unit(s.unit);
                sample.set_process_wall_seconds(wall_seconds[candidate]);
                sample.set_process_cpu_seconds(cpu_seconds[candidate]);
                samples_.push_back(sample);
              }
              return true;
            });
        if (!measured.ok() || !*measured) return measured;
        first_metric += b.metrics_size();
      }
      for (const v1::KernelCheck* c : timed_checks) {
        if (unchanged_.count(c->name()) > 0) {
          ++first_metric;
          continue;
        }
        absl::StatusOr<bool> measured = measure_both_arms(
            c->name(), 1, [&](bool candidate, const std::string& arm, int) -> absl::StatusOr<bool> {
              size_t metric_index = first_metric;
              std::string name = absl::StrFormat("timed-%s-%s-%d", c->name(), arm, pairs);
              KernelCheckSetup setup = CheckSetup(candidate, name);
              setup.reference = KernelCheckSetup::Reference::kBaselineCompute;
              KernelCheckReport r = RunKernelCheck(*c, setup);
              if (r.outcome != KernelCheckReport::Outcome::kPassed) {
                std::string message = absl::StrFormat("%s kernel check %s (pair %d): %s", arm,
                                                      c->name(), pairs, r.message);
                if (!candidate || r.outcome == KernelCheckReport::Outcome::kInfrastructure) {
                  infrastructure_ = absl::FailedPreconditionError(message);
                  micro.End(v1::STAGE_ERROR, message);
                } else {
                  failures_.push_back(Reason(r.outcome == KernelCheckReport::Outcome::kGaming
                                                 ? v1::GAMING
                                                 : v1::CORRECTNESS_FAILED,
                                             v1::MICROBENCHMARK, message));
                  micro.End(v1::STAGE_FAILED, message);
                }
                return false;
              }
              const double value = UpperMedian(r.call_seconds) * 1e9;
              double total = 0;
              for (double x : r.call_seconds) total += x;
              MetricSamples& s = metrics_[metric_index++];
              (candidate ? s.candidate : s.baseline).push_back(value);
              v1::Sample sample;
              sample.set_id(next_sample_id++);
              sample.set_metric(s.name);
              sample.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
              sample.set_pair_index(pairs);
              sample.set_value(value);
              sample.set_unit(s.unit);
              sample.set_process_wall_seconds(total);
              samples_.push_back(sample);
              return true;
            });
        if (!measured.ok() || !*measured) return measured;
        ++first_metric;
      }
      if (listener_) {
        v1::Progress p;
        p.set_stage(v1::MICROBENCHMARK);
        p.set_repetition(pairs + 1);
        p.set_repetitions_planned(target);
        p.set_metric(shown->name);
        p.set_current_estimate(RunningSpeedup(*shown, pairs + 1));
        listener_->OnProgress(p);
      }
    }
    gate_input_.metrics.clear();
    std::copy_if(metrics_.begin(), metrics_.end(), std::back_inserter(gate_input_.metrics),
                 [&](const MetricSamples& m) { return InScope(m.name); });
    absl::StatusOr<GateResult> result = results::Evaluate(gate_input_);
    if (!result.ok()) return result.status();
    if (!result->needs_more_pairs) {
      gate_ = *result;
      break;
    }
    target = result->next_pairs;
  }
  if (std::optional<std::string> mismatch = PooledOutputMismatch()) {
    failures_.push_back(Reason(v1::OUTPUT_MISMATCH, v1::END_TO_END, *mismatch));
    micro.End(v1::STAGE_FAILED, *mismatch);
    return false;
  }
  bool regressed = false;
  for (const v1::Reason& r : gate_.reasons) regressed |= r.code() == v1::REGRESSION;
  std::string summary =
      nothing_to_measure
          ? absl::StrFormat("not measured, the inputs of every benchmark and timed check are "
                            "byte-identical in both arms (%s): %s",
                            absl::StrJoin(unchanged_, ", "), v1::Decision_Name(gate_.decision))
          : absl::StrFormat("%d pairs, ABBA, fresh process each: %s", gate_.pairs_used,
                            v1::Decision_Name(gate_.decision));
  if (!nothing_to_measure && !unchanged_.empty()) {
    absl::StrAppend(&summary, "; not measured, inputs byte-identical in both arms: ",
                    absl::StrJoin(unchanged_, ", "));
  }
  if (!prior_note.empty()) absl::StrAppend(&summary, "; ", prior_note);
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
    absl::StrAppend(&summary, "; scoped to ", absl::StrJoin(request_.metric_scope, ", "),
                    out_of_scope.empty() ? "" : ", not run: " + absl::StrJoin(out_of_scope, ", "));
  }
  if (remeasured > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) measured again: the machine probe's time moved more "
                          "than %.2fx within the pair",
                          remeasured, options_.max_probe_spread);
  }
  if (host_.seconds_waited() > 0) {
    absl::StrAppendFormat(&summary, "; %.0f s waited for the host to settle (probe %.1f-%.1f ms)",
                          host_.seconds_waited(), host_.probe_fastest_ms(),
                          host_.probe_slowest_ms());
  }
  if (kept_unsteady > 0) {
    absl::StrAppendFormat(&summary,
                          "; %d pair(s) kept although it moved (a re-measure bound spent: %d "
                          "in a row, %d per evaluation, %.0f s)",
                          kept_unsteady, options_.max_remeasures_in_a_row,
                          gate_input_.params.max_pairs, options_.max_unsteady_seconds);
  }
  SummarizeCounters();
  const std::string traces = Traces();
  if (!traces.empty()) absl::StrAppend(&summary, "; ", traces);
  micro.End(regressed ? v1::STAGE_FAILED : v1::STAGE_PASSED, summary);
  if (has_micro && has_e2e) {
    StageRun e2e(v1::END_TO_END, nullptr, &stages_);
    e2e.End(stages_[stages_.size() - 2].status(),
            "interleaved with the microbenchmarks: " + summary);
  } else {
    Skip(has_micro ? v1::END_TO_END : v1::MICROBENCHMARK, "none declared", listener_, &stages_);
  }
  return true;
}

std::vector<double> Evaluation::MeasuredValues(const v1::BenchmarkSpec& b, bool candidate,
                                               const std::string& arm, int pair, int run,
                                               const std::string& pair_seed,
                                               const std::string& name, const ProcessResult& r,
                                               StageRun* stage) {
  std::string out = ReadOutputFile(LogPath(name + ".out"));
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
                      LastLines(ReadOutputFile(LogPath(name + ".err")), 6)));
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

void Evaluation::TakePriorSamples(int64_t* next_sample_id, std::string* note) {
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
      copy.set_id((*next_sample_id)++);
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
