#include "results/verdict/verdict.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"

namespace densegate::results {
namespace {

// The parts of a verdict that the gate computes (not ids, times, stages).
v1::Verdict Decided(const v1::Verdict& v) {
  v1::Verdict d;
  d.set_decision(v.decision());
  d.set_policy(v.policy());
  *d.mutable_reasons() = v.reasons();
  *d.mutable_metrics() = v.metrics();
  *d.mutable_claims() = v.claims();
  return d;
}

}  // namespace

bool IsStageFailure(v1::ReasonCode code) {
  return code == v1::BUILD_FAILED || code == v1::CORRECTNESS_FAILED ||
         code == v1::PRECISION_FAILED || code == v1::GAMING ||
         code == v1::PROTECTED_PATH || code == v1::OUTPUT_MISMATCH;
}

bool InconclusiveForNoise(const v1::Verdict& v) {
  if (v.decision() != v1::INCONCLUSIVE) return false;
  bool undecided = false;
  for (const v1::Reason& r : v.reasons()) {
    if (r.code() == v1::NEEDS_REVIEW || IsStageFailure(r.code())) return false;
    undecided |= r.code() == v1::UNDECIDED;
  }
  return undecided;
}

bool ContinuationDue(const v1::Evaluation& e) {
  const v1::Candidate& c = e.candidate();
  return e.state() == v1::FINISHED && c.continues().empty() && c.remeasure_of().empty() &&
         c.confirms().empty() &&
         c.error_share() > 0 &&
         c.error_share() < 1 && InconclusiveForNoise(e.verdict());
}

bool DecidedByStages(const v1::Verdict& v) {
  return std::any_of(v.reasons().begin(), v.reasons().end(),
                     [](const v1::Reason& r) { return IsStageFailure(r.code()); });
}

std::vector<MetricSamples> ManifestMetrics(const v1::Manifest& manifest) {
  std::vector<MetricSamples> metrics;
  for (const v1::BenchmarkSpec& b : manifest.benchmarks()) {
    for (const v1::MetricSpec& m : b.metrics()) {
      MetricSamples s;
      s.name = m.name();
      s.unit = m.unit();
      s.direction = m.direction();
      s.primary = m.primary();
      s.stage = b.kind() == v1::GOOGLE_BENCHMARK ? v1::MICROBENCHMARK : v1::END_TO_END;
      s.confirmed_by = m.confirmed_by();
      metrics.push_back(std::move(s));
    }
  }
  // A timed kernel check: the median of its verified calls, on the
  // harness's clock.
  for (const v1::KernelCheck& c : manifest.kernel_checks()) {
    if (c.metric().empty()) continue;
    MetricSamples s;
    s.name = c.metric();
    s.unit = "ns";
    s.direction = v1::LOWER_IS_BETTER;
    s.primary = true;
    s.stage = v1::MICROBENCHMARK;
    metrics.push_back(std::move(s));
  }
  return metrics;
}

bool InMetricScope(const v1::Manifest& manifest, absl::Span<const std::string> scope,
                   const std::string& metric) {
  auto scoped = [&](const std::string& name) {
    return scope.empty() || std::find(scope.begin(), scope.end(), name) != scope.end();
  };
  if (scoped(metric)) return true;
  for (const v1::BenchmarkSpec& b : manifest.benchmarks()) {
    for (const v1::MetricSpec& m : b.metrics()) {
      if (m.confirmed_by() == metric && scoped(m.name())) return true;
    }
  }
  return false;
}

absl::StatusOr<std::vector<MetricSamples>> PairSamples(
    absl::Span<const v1::Sample> samples, absl::Span<const MetricSamples> specs) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < specs.size(); ++i) index[specs[i].name] = i;
  // metric -> pair_index -> (baseline, candidate)
  std::vector<std::map<int, std::pair<const v1::Sample*, const v1::Sample*>>> pairs(
      specs.size());
  for (const v1::Sample& s : samples) {
    auto it = index.find(s.metric());
    if (it == index.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "sample %d is of metric \"%s\", which the manifest does not declare",
          s.id(), s.metric()));
    }
    if (s.arm() != v1::BASELINE && s.arm() != v1::CANDIDATE) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sample %d has no arm", s.id()));
    }
    auto& slot = pairs[it->second][s.pair_index()];
    const v1::Sample*& arm = s.arm() == v1::BASELINE ? slot.first : slot.second;
    if (arm != nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "metric %s pair %d has two %s samples (%d and %d)", s.metric(),
          s.pair_index(), v1::Arm_Name(s.arm()), arm->id(), s.id()));
    }
    arm = &s;
  }
  std::vector<MetricSamples> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    MetricSamples m = specs[i];
    m.baseline.clear();
    m.candidate.clear();
    for (const auto& [pair, arms] : pairs[i]) {
      if (arms.first == nullptr || arms.second == nullptr) continue;
      m.baseline.push_back(arms.first->value());
      m.candidate.push_back(arms.second->value());
    }
    // A metric whose inputs were identical was never measured; the gate
    // rejects samples on one.
    if (m.baseline.empty() && !m.inputs_identical) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "metric %s has no complete (baseline, candidate) pair", m.name));
    }
    out.push_back(std::move(m));
  }
  return out;
}

v1::Verdict MakeVerdict(const GateInput& input, const GateResult& result,
                        const VerdictContext& context) {
  v1::Verdict v;
  v.set_evaluation_id(context.evaluation_id);
  v.set_candidate_id(context.candidate_id);
  v.set_decision(result.decision);
  v.set_policy(input.policy);
  for (const auto& r : result.reasons) *v.add_reasons() = r;
  for (const auto& s : context.stages) *v.add_stages() = s;
  for (const auto& m : result.metrics) *v.add_metrics() = m;
  for (const auto& c : result.claims) *v.add_claims() = c;
  v1::Provenance* p = v.mutable_provenance();
  for (int64_t id : context.sample_ids) p->add_sample_ids(id);
  *p->mutable_policy_parameters() = ToProto(input.params);
  if (input.params.error_share < 1) p->set_error_share(input.params.error_share);
  p->set_second_part(input.params.second_part);
  p->set_manifest_hash(context.manifest_hash);
  p->set_node_id(context.node_id);
  p->set_node_fingerprint(context.node_fingerprint);
  p->set_software_version(context.software_version);
  p->set_isolation(context.isolation);
  p->set_statistics_seed(input.seed);
  for (const auto& b : context.benchmark_inputs) *p->add_benchmark_inputs() = b;
  if (context.host.ByteSizeLong() > 0) *p->mutable_host() = context.host;
  *v.mutable_decided_at() = google::protobuf::util::TimeUtil::NanosecondsToTimestamp(
      absl::ToUnixNanos(absl::Now()));
  return v;
}

namespace {

// The metrics a verdict's gate ran on, as `reported` describes them.
std::vector<MetricSamples> ReportedMetrics(const v1::Verdict& reported) {
  std::vector<MetricSamples> specs;
  for (const v1::MetricComparison& c : reported.metrics()) {
    MetricSamples m;
    m.name = c.metric();
    m.unit = c.unit();
    m.direction = c.direction();
    m.primary = c.primary();
    m.stage = c.stage();
    m.roofline_speedup = c.roofline_speedup();
    m.inputs_identical = c.inputs_identical();
    m.confirmed_by = c.confirmed_by();
    specs.push_back(std::move(m));
  }
  return specs;
}

// The metrics `manifest` gates in the evaluation's scope, as it describes
// them; only whether each one's inputs were identical is `reported`'s (a
// measurement). InvalidArgument when `reported` leaves one out or has one
// more.
absl::StatusOr<std::vector<MetricSamples>> DeclaredMetrics(const v1::Manifest& manifest,
                                                           const v1::Evaluation& evaluation,
                                                           const v1::Verdict& reported) {
  const std::vector<std::string> scope(evaluation.candidate().metric_scope().begin(),
                                       evaluation.candidate().metric_scope().end());
  std::map<std::string, const v1::MetricComparison*> by_name;
  for (const v1::MetricComparison& c : reported.metrics()) by_name[c.metric()] = &c;
  std::vector<MetricSamples> specs;
  for (MetricSamples& declared : ManifestMetrics(manifest)) {
    if (!InMetricScope(manifest, scope, declared.name)) continue;
    auto it = by_name.find(declared.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the reported verdict leaves out %s, which the baseline's manifest gates",
          declared.name));
    }
    declared.inputs_identical = it->second->inputs_identical();
    by_name.erase(it);
    specs.push_back(std::move(declared));
  }
  if (!by_name.empty()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the reported verdict has %s, which the baseline's manifest does not gate here",
        by_name.begin()->first));
  }
  return specs;
}

}  // namespace

absl::StatusOr<v1::Verdict> Redecide(const v1::Verdict& reported,
                                     const v1::Evaluation& evaluation,
                                     absl::Span<const v1::Sample> samples,
                                     const v1::Manifest* manifest) {
  const v1::Provenance& provenance = reported.provenance();
  GateInput input;
  input.policy = EffectivePolicy(evaluation.candidate().policy(), evaluation.candidate().kind());
  absl::StatusOr<GateParameters> params = ResolveGateParameters(
      manifest != nullptr ? manifest->gate() : provenance.policy_parameters());
  if (!params.ok()) return params.status();
  input.params = *params;
  if (manifest != nullptr) {
    const v1::Candidate& c = evaluation.candidate();
    input.params = PartParameters(*params, c.error_share(), !c.continues().empty());
  } else {
    // The recorded pair counts are the part's already.
    input.params.error_share = provenance.error_share() > 0 ? provenance.error_share() : 1;
    input.params.second_part = provenance.second_part();
  }
  input.seed = provenance.statistics_seed();
  input.claims.assign(evaluation.candidate().claims().begin(),
                      evaluation.candidate().claims().end());
  for (const v1::Reason& r : reported.reasons()) {
    if (IsStageFailure(r.code())) input.stage_failures.push_back(r);
  }

  if (input.stage_failures.empty()) {
    absl::StatusOr<std::vector<MetricSamples>> specs =
        manifest != nullptr ? DeclaredMetrics(*manifest, evaluation, reported)
                            : ReportedMetrics(reported);
    if (!specs.ok()) return specs.status();
    absl::StatusOr<std::vector<MetricSamples>> paired = PairSamples(samples, *specs);
    if (!paired.ok()) return paired.status();
    input.metrics = *std::move(paired);
  }

  absl::StatusOr<GateResult> result = Evaluate(input);
  if (!result.ok()) return result.status();
  if (result->needs_more_pairs) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the samples of %s are not enough for a decision (the gate asks for %d pairs)",
        reported.evaluation_id(), result->next_pairs));
  }
  VerdictContext context;
  context.evaluation_id = reported.evaluation_id();
  context.candidate_id = reported.candidate_id();
  context.manifest_hash = provenance.manifest_hash();
  context.node_id = provenance.node_id();
  context.node_fingerprint = provenance.node_fingerprint();
  context.software_version = provenance.software_version();
  context.isolation = provenance.isolation();
  context.sample_ids.assign(provenance.sample_ids().begin(), provenance.sample_ids().end());
  context.stages.assign(reported.stages().begin(), reported.stages().end());
  context.benchmark_inputs.assign(provenance.benchmark_inputs().begin(),
                                  provenance.benchmark_inputs().end());
  context.host = provenance.host();
  return MakeVerdict(input, *result, context);
}

absl::StatusOr<std::vector<v1::Sample>> NamedSamples(Store& store,
                                                     absl::string_view evaluation_id,
                                                     const v1::Provenance& provenance) {
  std::vector<v1::Sample> samples;
  if (provenance.sample_ids().empty()) return samples;
  absl::StatusOr<std::vector<v1::Sample>> all = store.ListSamples(evaluation_id);
  if (!all.ok()) return all.status();
  const std::set<int64_t> named(provenance.sample_ids().begin(), provenance.sample_ids().end());
  for (v1::Sample& s : *all) {
    if (named.count(s.id()) > 0) samples.push_back(std::move(s));
  }
  return samples;
}

std::vector<std::string> DecisionDifferences(const v1::Verdict& a, const v1::Verdict& b) {
  std::string report;
  google::protobuf::util::MessageDifferencer differ;
  {
    google::protobuf::io::StringOutputStream stream(&report);
    google::protobuf::util::MessageDifferencer::StreamReporter reporter(&stream);
    differ.ReportDifferencesTo(&reporter);
    differ.Compare(Decided(a), Decided(b));
  }
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(report, '\n', absl::SkipEmpty())) {
    lines.emplace_back(line);
  }
  return lines;
}

absl::StatusOr<Recomputation> RecomputeVerdict(Store& store,
                                               absl::string_view evaluation_id) {
  absl::StatusOr<v1::Evaluation> evaluation = store.GetEvaluation(evaluation_id);
  if (!evaluation.ok()) return evaluation.status();
  absl::StatusOr<v1::Verdict> stored = store.GetVerdict(evaluation_id);
  if (!stored.ok()) return stored.status();
  absl::StatusOr<std::vector<v1::Sample>> samples =
      NamedSamples(store, evaluation_id, stored->provenance());
  if (!samples.ok()) return samples.status();
  const std::set<int64_t> named(stored->provenance().sample_ids().begin(),
                                stored->provenance().sample_ids().end());
  if (samples->size() != named.size()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "verdict of %s names %d samples but only %d are in the store",
        std::string(evaluation_id), named.size(), samples->size()));
  }
  absl::StatusOr<v1::Verdict> recomputed = Redecide(*stored, *evaluation, *samples);
  if (!recomputed.ok()) return recomputed.status();
  Recomputation out;
  out.stored = *stored;
  out.recomputed = *std::move(recomputed);
  out.differences = DecisionDifferences(out.stored, out.recomputed);
  return out;
}

}  // namespace densegate::results
