#include "harness/node/testing/scripted_job_runner.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "harness/feedback.h"
#include "manifest/manifest.h"
#include "platform/git/git.h"
#include "results/feedback/bundle.h"
#include "results/gate/gate.h"
#include "results/verdict/verdict.h"

namespace densegate::harness::testing {
namespace {

v1::Stage EndedStage(v1::StageKind kind, v1::StageStatus status, const std::string& summary) {
  v1::Stage s;
  s.set_kind(kind);
  s.set_status(status);
  s.set_summary(summary);
  return s;
}

// Within half a percent of 1, the same every five pairs: pairs that differ
// as measured ones do, yet decide the same on every run.
double Wobble(int pair) { return 1 + 0.005 * ((pair * 7) % 5 - 2) / 2.0; }

// The bundle a real node's evaluation writes, read back as a node does.
absl::StatusOr<v1::FeedbackBundle> ScriptedBundle(const ScriptedAnswer& answer,
                                                  const EvalOutcome& outcome,
                                                  const std::vector<v1::Stage>& stages,
                                                  int64_t feedback_max_bytes) {
  std::string dir = ::testing::TempDir() + "/scripted-feedback-XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  // The logs first: the summary quotes a failed stage's first errors.
  std::error_code ec;
  std::filesystem::create_directories(dir + "/logs", ec);
  std::ofstream(dir + "/logs/bench-scripted.out") << std::string(answer.log_bytes, 'x');
  if (answer.kind == ScriptedAnswer::Kind::kCorrectnessFails) {
    std::ofstream(dir + "/logs/correctness-candidate-scripted.err")
        << "[ RUN      ] Scripted.Check\n[  FAILED  ] Scripted.Check (check: exit code 1)\n";
  }
  WriteFeedbackBundle(dir, &outcome.verdict, stages, outcome.samples, {}, absl::OkStatus());
  absl::StatusOr<v1::FeedbackBundle> bundle = results::ReadBundleDir(dir, feedback_max_bytes);
  std::filesystem::remove_all(dir, ec);
  return bundle;
}

}  // namespace

ScriptedJobRunner::ScriptedJobRunner(Script script, platform::ProcessLauncher* launcher,
                                     double calibration_noise)
    : script_(std::move(script)), launcher_(launcher), calibration_noise_(calibration_noise) {}

v1::NodeDimensions ScriptedJobRunner::Dimensions() {
  v1::NodeDimensions d;
  d.set_accelerator_kind("cpu");
  d.set_cpu_model("scripted");
  d.set_cpu_cores(1);
  d.set_fingerprint("scripted");
  return d;
}

std::vector<EvalRequest> ScriptedJobRunner::requests() const {
  absl::MutexLock l(&mu_);
  return requests_;
}

absl::StatusOr<EvalOutcome> ScriptedJobRunner::Evaluate(const std::string& node_id,
                                                        const EvalRequest& request,
                                                        int64_t feedback_max_bytes,
                                                        EvalListener* listener) {
  {
    absl::MutexLock l(&mu_);
    requests_.push_back(request);
  }
  const ScriptedAnswer answer = script_(request);
  platform::Git git(launcher_);
  absl::StatusOr<std::string> text =
      git.ShowFile(request.repo, request.baseline_ref, "densegate.json");
  if (!text.ok()) return text.status();
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> manifest = ParseManifest(*text, &errors);
  if (!manifest.ok()) return manifest.status();
  absl::StatusOr<results::GateParameters> params = results::ResolveGateParameters(manifest->gate());
  if (!params.ok()) return params.status();

  results::GateInput input;
  input.policy = request.policy == v1::POLICY_UNSPECIFIED ? v1::GAIN : request.policy;
  input.params = results::PartParameters(*params, request.error_share, !request.continues.empty());
  input.claims = request.claims;
  input.seed = request.seed;
  for (results::MetricSamples& m : results::ManifestMetrics(*manifest)) {
    if (results::InMetricScope(*manifest, request.metric_scope, m.name)) {
      input.metrics.push_back(std::move(m));
    }
  }
  std::vector<v1::Stage> stages;
  auto stage = [&](v1::StageKind kind, v1::StageStatus status, const std::string& summary) {
    stages.push_back(EndedStage(kind, status, summary));
    listener->OnStage(stages.back());
  };
  stage(v1::PREFLIGHT, v1::STAGE_PASSED, "scripted: both commits checked out");
  stage(v1::BUILD, v1::STAGE_PASSED, "scripted: both arms built");

  if (answer.until_cancelled) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    for (int tick = 0; std::chrono::steady_clock::now() < give_up; ++tick) {
      if (listener->Cancelled()) {
        EvalOutcome cancelled;
        cancelled.infrastructure_error = absl::CancelledError("cancelled by the scheduler");
        return cancelled;
      }
      if (tick % 50 == 0) {
        v1::Progress p;
        p.set_stage(v1::CORRECTNESS);
        p.set_message(absl::StrFormat("scripted: running, tick %d", tick));
        listener->OnProgress(p);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  EvalOutcome outcome;
  results::GateResult result;
  if (answer.kind == ScriptedAnswer::Kind::kCorrectnessFails) {
    stage(v1::CORRECTNESS, v1::STAGE_FAILED, "scripted: 1 of 1 checks failed");
    v1::Reason& failed = input.stage_failures.emplace_back();
    failed.set_code(v1::CORRECTNESS_FAILED);
    failed.set_message("check: exit code 1");
    absl::StatusOr<results::GateResult> decided = results::Evaluate(input);
    if (!decided.ok()) return decided.status();
    result = *decided;
  } else {
    stage(v1::CORRECTNESS, v1::STAGE_PASSED, "scripted: every check passed");
    const bool measured = answer.kind == ScriptedAnswer::Kind::kMeasured;
    for (results::MetricSamples& m : input.metrics) m.inputs_identical = !measured;
    // Pairs one at a time, the gate asked at each of its looks, as the
    // benchmark stage does.
    const results::SequentialPlan plan = results::PlanLooks(input.params);
    int pairs = 0;
    for (int look : plan.pairs) {
      for (; measured && pairs < look; ++pairs) {
        for (results::MetricSamples& m : input.metrics) {
          const double base = 100.0 * Wobble(pairs);
          const double cand = 100.0 * answer.ratio * (2 - Wobble(pairs));
          for (bool candidate : {false, true}) {
            const double value = candidate ? cand : base;
            (candidate ? m.candidate : m.baseline).push_back(value);
            v1::Sample& s = outcome.samples.emplace_back();
            s.set_id(static_cast<int64_t>(outcome.samples.size()));
            s.set_metric(m.name);
            s.set_arm(candidate ? v1::CANDIDATE : v1::BASELINE);
            s.set_pair_index(pairs);
            s.set_unit(m.unit);
            s.set_value(value);
          }
        }
        v1::Progress p;
        p.set_stage(v1::MICROBENCHMARK);
        p.set_repetition(pairs + 1);
        p.set_repetitions_planned(input.params.max_pairs);
        listener->OnProgress(p);
      }
      absl::StatusOr<results::GateResult> decided = results::Evaluate(input);
      if (!decided.ok()) return decided.status();
      result = *decided;
      if (!result.needs_more_pairs || !measured) break;
    }
    stage(v1::MICROBENCHMARK, v1::STAGE_PASSED,
          measured ? absl::StrFormat("scripted: %d pairs", pairs)
                   : "scripted: inputs identical in both arms, no pairs");
  }
  results::VerdictContext context;
  context.evaluation_id = request.evaluation_id;
  context.candidate_id = absl::StrFormat(
      "%016x", std::hash<std::string>{}(request.baseline_ref + request.candidate_ref));
  context.node_id = node_id;
  context.node_fingerprint = "scripted";
  context.software_version = "scripted";
  context.isolation = "none";
  for (const v1::Sample& s : outcome.samples) context.sample_ids.push_back(s.id());
  context.stages = stages;
  outcome.verdict = results::MakeVerdict(input, result, context);
  absl::StatusOr<v1::FeedbackBundle> bundle =
      ScriptedBundle(answer, outcome, stages, feedback_max_bytes);
  if (!bundle.ok()) return bundle.status();
  outcome.feedback = *std::move(bundle);
  return outcome;
}

}  // namespace densegate::harness::testing
