// The benchmark stage's ABBA loop: pair after pair, each benchmark's two
// arms back to back under the host lock, in fresh processes; a pair
// measured again when the machine probe moved within it (bounded by count
// and by time, with a backoff wait for the host to settle); the gate's
// looks between batches of pairs.
#include "harness/internal/evaluation.h"

namespace densegate::harness::internal {

absl::StatusOr<bool> Evaluation::MeasurePairs(const BenchmarkPlan& plan, StageRun* stage) {
  if (options_.machine_probe != nullptr) options_.machine_probe->Seconds();  // Warms its array.
  loop_.target =
      plan.nothing_to_measure ? 0 : results::PlanLooks(gate_input_.params).pairs.front();
  while (true) {
    for (; loop_.pair < loop_.target; ++loop_.pair) {
      if (listener_ != nullptr && listener_->Cancelled()) {
        infrastructure_ = absl::CancelledError("the evaluation was cancelled");
        stage->End(v1::STAGE_CANCELLED, "cancelled");
        return false;
      }
      absl::StatusOr<bool> measured = MeasurePair(plan, stage);
      if (!measured.ok() || !*measured) return measured;
      if (listener_ != nullptr && plan.shown_metric < metrics_.size()) {
        const MetricSamples& shown = metrics_[plan.shown_metric];
        v1::Progress p;
        p.set_stage(v1::MICROBENCHMARK);
        p.set_repetition(loop_.pair + 1);
        p.set_repetitions_planned(loop_.target);
        p.set_metric(shown.name);
        p.set_current_estimate(RunningSpeedup(shown, loop_.pair + 1));
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
      return true;
    }
    loop_.target = result->next_pairs;
  }
}

absl::StatusOr<bool> Evaluation::MeasurePair(const BenchmarkPlan& plan, StageRun* stage) {
  size_t first_metric = 0;
  // The prompts of this pair's serving runs: drawn here, the same for both
  // arms, unknown to any build (OutputCheck).
  const std::string pair_seed = PromptSeed();
  for (const v1::BenchmarkSpec& b : manifest_.benchmarks()) {
    const auto carried = carried_pairs_.find(b.name());
    const bool measured_here = !unchanged_.count(b.name()) && InScope(b) &&
                               (carried == carried_pairs_.end() || loop_.pair >= carried->second);
    if (measured_here) {
      absl::StatusOr<bool> measured =
          MeasureBenchmark(b, plan.runs_per_arm.at(b.name()), first_metric, pair_seed, stage);
      if (!measured.ok() || !*measured) return measured;
    }
    first_metric += b.metrics_size();
  }
  for (const v1::KernelCheck* c : plan.timed_checks) {
    if (unchanged_.count(c->name()) == 0) {
      absl::StatusOr<bool> measured = MeasureTimedCheck(*c, first_metric, stage);
      if (!measured.ok() || !*measured) return measured;
    }
    ++first_metric;
  }
  return true;
}

absl::StatusOr<bool> Evaluation::MeasureBenchmark(const v1::BenchmarkSpec& b, int runs,
                                                  size_t first_metric,
                                                  const std::string& pair_seed, StageRun* stage) {
  const int pair = loop_.pair;
  // Per arm (baseline, candidate) and metric, the log of each run's value:
  // the sample is their geometric mean (EndToEndRunsPerArm).
  std::vector<double> log_sum[2];
  double wall_seconds[2] = {0, 0}, cpu_seconds[2] = {0, 0};
  return MeasureBothArms(
      b.name(), runs,
      [&](bool candidate, const std::string& arm, int run) -> absl::StatusOr<bool> {
        if (run == 0) {  // Also when the pair is measured again.
          log_sum[candidate].assign(b.metrics_size(), 0);
          wall_seconds[candidate] = cpu_seconds[candidate] = 0;
        }
        std::string command = absl::StrReplaceAll(b.command(), {{kSeedPlaceholder, pair_seed}});
        if (b.kind() == v1::GOOGLE_BENCHMARK) command += " --benchmark_format=json";
        std::string name = absl::StrFormat("bench-%s-%s-%d", b.name(), arm, pair);
        if (run > 0) absl::StrAppend(&name, "-run", run + 1);
        absl::StatusOr<platform::ProcessResult> r = Shell(command, candidate, name, b.timeout_s(),
                                                ArmSandbox(candidate, Access::kMeasure));
        if (!r.ok()) return r.status();
        wall_seconds[candidate] += r->wall_seconds;
        cpu_seconds[candidate] += r->user_seconds + r->system_seconds;
        const std::vector<double> values =
            MeasuredValues(b, candidate, arm, pair, run, pair_seed, name, *r, stage);
        if (values.empty()) return false;  // MeasuredValues recorded why.
        for (size_t i = 0; i < values.size(); ++i) log_sum[candidate][i] += std::log(values[i]);
        if (run + 1 < runs) return true;
        for (size_t i = 0; i < values.size(); ++i) {
          MetricSamples& m = metrics_[first_metric + i];
          // Kept out of the samples too, so that recompute sees what the gate saw.
          if (!InScope(m.name)) continue;
          AddSample(&m, candidate, std::exp(log_sum[candidate][i] / runs),
                    wall_seconds[candidate], cpu_seconds[candidate]);
        }
        return true;
      });
}

absl::StatusOr<bool> Evaluation::MeasureTimedCheck(const v1::KernelCheck& c, size_t metric_index,
                                                   StageRun* stage) {
  const int pair = loop_.pair;
  return MeasureBothArms(
      c.name(), 1, [&](bool candidate, const std::string& arm, int) -> absl::StatusOr<bool> {
        KernelCheckSetup setup =
            CheckSetup(candidate, absl::StrFormat("timed-%s-%s-%d", c.name(), arm, pair));
        setup.reference = KernelCheckSetup::Reference::kBaselineCompute;
        const KernelCheckReport r = RunKernelCheck(c, setup);
        if (r.outcome != KernelCheckReport::Outcome::kPassed) {
          const std::string message =
              absl::StrFormat("%s kernel check %s (pair %d): %s", arm, c.name(), pair, r.message);
          if (!candidate || r.outcome == KernelCheckReport::Outcome::kInfrastructure) {
            infrastructure_ = absl::FailedPreconditionError(message);
            stage->End(v1::STAGE_ERROR, message);
          } else {
            failures_.push_back(Reason(r.outcome == KernelCheckReport::Outcome::kGaming
                                           ? v1::GAMING
                                           : v1::CORRECTNESS_FAILED,
                                       v1::MICROBENCHMARK, message));
            stage->End(v1::STAGE_FAILED, message);
          }
          return false;
        }
        double total = 0;
        for (double x : r.call_seconds) total += x;
        AddSample(&metrics_[metric_index], candidate, UpperMedian(r.call_seconds) * 1e9, total,
                  0);
        return true;
      });
}

void Evaluation::AddSample(MetricSamples* metric, bool candidate, double value,
                           double wall_seconds, double cpu_seconds) {
  (candidate ? metric->candidate : metric->baseline).push_back(value);
  v1::Sample& sample = samples_.emplace_back();
  sample.set_id(next_sample_id_++);
  sample.set_metric(metric->name);
  sample.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
  sample.set_pair_index(loop_.pair);
  sample.set_value(value);
  sample.set_unit(metric->unit);
  sample.set_process_wall_seconds(wall_seconds);
  sample.set_process_cpu_seconds(cpu_seconds);
}

// Both arms back to back under one hold of the host lock (the machine to
// themselves), so that a slow spell of the host lasting seconds meets both
// arms, not one (arm by arm, with two nodes taking turns, they were ~10 s
// apart); even pairs the baseline first (ABBA). With several runs per arm
// the arms alternate run by run, each run in the other order from the last
// (B C C B B C ...): repeats in one arm back to back left a drift of the
// host's speed between the arms in every sample
// (docs/measurements/noise.md). The probe runs before each arm's first run
// and after the last.
absl::StatusOr<bool> Evaluation::MeasureBothArms(const std::string& benchmark, int runs,
                                                 RunArm run_arm) {
  MachineProbe* probe = options_.machine_probe;
  for (int tries = 1;; ++tries) {
    const PairUndo before{metrics_, samples_.size(), counter_samples_, agreement_,
                          next_sample_id_};
    const absl::Time started = absl::Now();
    std::vector<double> probe_seconds;
    {
      HostLock::Guard measuring(options_.host_lock, HostLock::Mode::kExclusive);
      for (int run = 0; run < runs; ++run) {
        for (int turn = 0; turn < 2; ++turn) {
          const bool candidate = ((loop_.pair + run) % 2 == 0) == (turn == 1);
          if (probe != nullptr && run == 0) probe_seconds.push_back(ReadProbe());
          absl::StatusOr<bool> ok = run_arm(candidate, candidate ? "candidate" : "baseline", run);
          if (!ok.ok() || !*ok) return ok;
        }
      }
      if (probe != nullptr) probe_seconds.push_back(ReadProbe());
    }
    if (!MeasureAgain(before, probe_seconds, benchmark, runs, tries,
                      absl::ToDoubleSeconds(absl::Now() - started))) {
      return true;
    }
  }
}

bool Evaluation::MeasureAgain(const PairUndo& before, const std::vector<double>& probe_seconds,
                              const std::string& benchmark, int runs, int tries,
                              double run_seconds) {
  if (probe_seconds.empty()) return false;
  const auto [fastest, slowest] = std::minmax_element(probe_seconds.begin(), probe_seconds.end());
  if (*slowest <= *fastest * options_.max_probe_spread) {
    loop_.unsteady_in_a_row = 0;
    return false;
  }
  ++loop_.unsteady_in_a_row;
  if (loop_.remeasured >= gate_input_.params.max_pairs ||
      tries > options_.max_remeasures_in_a_row ||
      loop_.unsteady_seconds + run_seconds > options_.max_unsteady_seconds) {
    host_.set_pairs_kept_unsteady(++loop_.kept_unsteady);
    return false;
  }
  host_.set_pairs_measured_again(++loop_.remeasured);
  loop_.unsteady_seconds += run_seconds;
  SayUnsteady(absl::StrFormat(
      "%s, pair %d measured again: the machine probe took %.2f-%.2f ms within it", benchmark,
      loop_.pair + 1, 1e3 * *fastest, 1e3 * *slowest));
  metrics_ = before.metrics;
  samples_.resize(before.samples);
  counter_samples_ = before.counters;
  // Both arms' outputs of the pair are generated again, and compared once.
  agreement_ = before.agreement;
  for (auto& arm : generated_) {
    for (int run = 0; run < runs; ++run) arm.erase({benchmark, loop_.pair, run});
  }
  next_sample_id_ = before.next_sample_id;
  // Backoff: 5 s after the first unsteady measurement, doubling with each
  // one in a row (across pairs), capped at a minute and at what is left of
  // the evaluation's unsteady budget.
  const double wait = std::min(
      {options_.first_unsteady_wait_seconds * std::pow(2.0, std::min(loop_.unsteady_in_a_row, 8) - 1),
       60.0, options_.max_unsteady_seconds - loop_.unsteady_seconds});
  if (wait >= 1) {
    const double waited = WaitForSteadyHost(wait, *fastest, *slowest);
    loop_.unsteady_seconds += waited;
    host_.set_seconds_waited(host_.seconds_waited() + waited);
  }
  return true;
}

double Evaluation::WaitForSteadyHost(double seconds, double fastest, double slowest) {
  SayUnsteady(absl::StrFormat("host unsteady: waiting up to %.0f s, probe %.1f-%.1f ms vs %.1f ms calm",
                              seconds, 1e3 * fastest, 1e3 * slowest, host_.probe_fastest_ms()));
  std::deque<double> last;
  double waited = 0;
  while (waited < seconds && !(listener_ != nullptr && listener_->Cancelled())) {
    options_.machine_probe->Pause(absl::Seconds(1));
    waited += 1;
    last.push_back(ReadProbe());
    if (last.size() > 3) last.pop_front();
    if (last.size() == 3 && *std::max_element(last.begin(), last.end()) <=
                                *std::min_element(last.begin(), last.end()) *
                                    options_.max_probe_spread) {
      break;
    }
  }
  return waited;
}

double Evaluation::ReadProbe() {
  const double seconds = options_.machine_probe->Seconds();
  const double ms = 1e3 * seconds;
  if (host_.probe_reads() == 0 || ms < host_.probe_fastest_ms()) host_.set_probe_fastest_ms(ms);
  host_.set_probe_slowest_ms(std::max(host_.probe_slowest_ms(), ms));
  host_.set_probe_reads(host_.probe_reads() + 1);
  return seconds;
}

void Evaluation::SayUnsteady(const std::string& message) const {
  if (listener_ == nullptr) return;
  v1::Progress p;
  p.set_stage(v1::MICROBENCHMARK);
  p.set_repetition(loop_.pair);
  p.set_repetitions_planned(loop_.target);
  p.set_message(message);
  listener_->OnProgress(p);
}

}  // namespace densegate::harness::internal
