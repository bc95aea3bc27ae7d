#include "harness/runner/precision_suite.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "harness/runner/inputs.h"
#include "harness/runner/precision_baseline_cache.h"
#include "harness/runner/runner_client.h"

namespace densegate::harness {
namespace {

using Outcome = PrecisionReport::Outcome;

constexpr int64_t kWindow = 256;
constexpr absl::Duration kCallTimeout = absl::Minutes(10);

PrecisionReport Report(Outcome o, std::string message) {
  PrecisionReport r;
  r.outcome = o;
  r.message = std::move(message);
  return r;
}

// The runner shape of one sequence of `tokens` tokens: the suite's shape
// with its length. What "tokens" means for the op is the runner's business.
nlohmann::json Shape(const v1::PrecisionSuite& s, int64_t tokens) {
  nlohmann::json shape = nlohmann::json::object();
  for (const auto& [key, value] : s.shape()) shape[key] = value;
  shape["tokens"] = tokens;
  return shape;
}

PrecisionCurve Curve(const std::vector<int64_t>& lengths, const float* out, const double* ref,
                     int64_t per_token) {
  PrecisionCurve c;
  for (int64_t len : lengths) {
    const int64_t begin = std::max<int64_t>(0, len - kWindow) * per_token;
    const int64_t end = len * per_token;
    double num = 0, den = 0, max_abs = 0;
    for (int64_t i = begin; i < end; ++i) {
      const double d = out[i] - ref[i];
      num += d * d;
      den += ref[i] * ref[i];
      max_abs = std::max(max_abs, std::isfinite(d) ? std::abs(d) : INFINITY);
    }
    c.lengths.push_back(len);
    double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    c.rel_rms.push_back(std::isfinite(rel) ? rel : INFINITY);
    c.max_abs_err.push_back(max_abs);
  }
  return c;
}

nlohmann::json CurveJson(const PrecisionCurve& c) {
  nlohmann::json points = nlohmann::json::array();
  for (size_t i = 0; i < c.lengths.size(); ++i) {
    points.push_back({{"length", c.lengths[i]},
                      {"rel_rms", c.rel_rms[i]},
                      {"max_abs_err", c.max_abs_err[i]}});
  }
  return points;
}

const RunnerBuffer* PerTokenOutput(const RunnerLayout& layout, int64_t tokens) {
  for (const RunnerBuffer& b : layout.buffers) {
    if (b.name == "out") return b.count % tokens == 0 ? &b : nullptr;
  }
  return nullptr;
}

// Prepares `client`'s memory for one call: the drawn inputs copied in, the
// outputs poisoned.
absl::Status Fill(RunnerClient* client, const PrecisionBaseline& baseline, bool reference) {
  if (absl::Status s = client->Prepare(baseline.layout, reference); !s.ok()) return s;
  for (size_t i = 0; i < baseline.layout.buffers.size(); ++i) {
    const RunnerBuffer& b = baseline.layout.buffers[i];
    if (b.role == BufferRole::kOutput) {
      std::memset(client->Buffer(b), 0xFF, b.count * 4);
    } else {
      std::memcpy(client->Buffer(b), baseline.inputs[i].data(), b.count * 4);
    }
  }
  return absl::OkStatus();
}

// The baseline's half of a sweep: the baseline-built runner describes the op,
// one sequence is drawn, and that runner computes the fp64 reference and
// its own fp32 result, in two processes. Any failure is the infrastructure's.
absl::StatusOr<std::shared_ptr<const PrecisionBaseline>> RunBaseline(
    const v1::PrecisionSuite& suite, const PrecisionSetup& setup,
    const std::vector<int64_t>& lengths) {
  const int64_t longest = lengths.back();
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : suite.params()) params[k] = v;
  const char* names[] = {"reference", "baseline"};
  std::unique_ptr<RunnerClient> clients[2];
  for (int i = 0; i < 2; ++i) {
    auto c = RunnerClient::Start(setup.launcher, setup.baseline_dir, suite.runner(),
                                 absl::StrFormat("%s-%s.err", setup.log_prefix, names[i]),
                                 setup.cpus, kCallTimeout * 2, setup.baseline_confinement);
    if (!c.ok()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s runner did not start: %s", names[i], c.status().message()));
    }
    clients[i] = std::move(*c);
  }
  auto described = clients[0]->Describe(suite.op(), Shape(suite, longest), params);
  if (!described.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the baseline runner cannot describe %s: %s", suite.op(), described.status().message()));
  }
  auto baseline = std::make_shared<PrecisionBaseline>();
  baseline->layout = *std::move(described);
  const RunnerBuffer* out = PerTokenOutput(baseline->layout, longest);
  if (out == nullptr) {
    return absl::FailedPreconditionError("the runner's layout has no per-token \"out\" buffer");
  }
  if (absl::Status s = DrawInputs(baseline->layout, HiddenSeed(setup.salt), &baseline->inputs);
      !s.ok()) {
    return s;
  }
  for (int i = 0; i < 2; ++i) {
    const bool reference = i == 0;
    if (absl::Status s = Fill(clients[i].get(), *baseline, reference); !s.ok()) return s;
    absl::StatusOr<double> t = clients[i]->Run(baseline->layout, reference, kCallTimeout);
    if (!t.ok()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s runner failed the %d-token sweep: %s", names[i], longest, t.status().message()));
    }
  }
  const double* ref = clients[0]->Result(*out);
  baseline->reference.assign(ref, ref + out->count);
  baseline->curve = Curve(lengths, clients[1]->Buffer(*out), ref, out->count / longest);
  return baseline;
}

}  // namespace

nlohmann::json PrecisionReport::ToJson(const v1::PrecisionSuite& suite) const {
  return {{"suite", suite.name()},
          {"op", suite.op()},
          {"max_rel_rms", suite.max_rel_rms()},
          {"max_growth_vs_baseline",
           suite.max_growth_vs_baseline() > 0 ? suite.max_growth_vs_baseline() : 2.0},
          {"passed", outcome == Outcome::kPassed},
          {"message", message},
          {"baseline", CurveJson(baseline)},
          {"candidate", CurveJson(candidate)}};
}

v1::PrecisionCurve PrecisionReport::ToProto(const v1::PrecisionSuite& suite) const {
  v1::PrecisionCurve out;
  out.set_suite(suite.name());
  out.set_op(suite.op());
  out.set_max_rel_rms(suite.max_rel_rms());
  auto fill = [](const PrecisionCurve& curve, auto* points) {
    for (size_t i = 0; i < curve.lengths.size() && i < curve.rel_rms.size(); ++i) {
      v1::PrecisionPoint* p = points->Add();
      p->set_length(curve.lengths[i]);
      p->set_rel_rms(curve.rel_rms[i]);
      if (i < curve.max_abs_err.size()) p->set_max_abs_err(curve.max_abs_err[i]);
    }
  };
  fill(baseline, out.mutable_baseline());
  fill(candidate, out.mutable_candidate());
  return out;
}

PrecisionReport RunPrecisionSuite(const v1::PrecisionSuite& suite, const PrecisionSetup& setup) {
  std::vector<int64_t> lengths(suite.lengths().begin(), suite.lengths().end());
  if (lengths.empty()) return Report(Outcome::kInfrastructure, "suite has no lengths");
  const int64_t longest = lengths.back();

  const bool keep = setup.baselines != nullptr && !setup.baseline_key.empty();
  std::shared_ptr<const PrecisionBaseline> baseline =
      keep ? setup.baselines->Find(setup.baseline_key) : nullptr;
  const bool reused = baseline != nullptr;
  if (!reused) {
    absl::StatusOr<std::shared_ptr<const PrecisionBaseline>> computed =
        RunBaseline(suite, setup, lengths);
    if (!computed.ok()) {
      return Report(Outcome::kInfrastructure, std::string(computed.status().message()));
    }
    baseline = *std::move(computed);
    if (keep) setup.baselines->Insert(setup.baseline_key, baseline);
  }

  PrecisionReport report;
  report.baseline = baseline->curve;
  std::string notes;
  if (setup.candidate_runner_identical) {
    report.candidate = report.baseline;
    notes =
        "; the candidate's runner is byte-identical to the baseline's: its errors are the "
        "baseline's, not computed again";
  } else {
    auto c = RunnerClient::Start(setup.launcher, setup.candidate_dir, suite.runner(),
                                 absl::StrFormat("%s-candidate.err", setup.log_prefix), setup.cpus,
                                 kCallTimeout * 2, setup.candidate_confinement);
    if (!c.ok()) {
      return Report(Outcome::kFailed,
                    absl::StrFormat("candidate runner did not start: %s", c.status().message()));
    }
    if (absl::Status s = Fill(c->get(), *baseline, false); !s.ok()) {
      return Report(Outcome::kInfrastructure, std::string(s.message()));
    }
    absl::StatusOr<double> t = (*c)->Run(baseline->layout, false, kCallTimeout);
    if (!t.ok()) {
      return Report(Outcome::kFailed,
                    absl::StrFormat("candidate runner failed the %d-token sweep: %s", longest,
                                    t.status().message()));
    }
    const RunnerBuffer* out = PerTokenOutput(baseline->layout, longest);
    report.candidate =
        Curve(lengths, (*c)->Buffer(*out), baseline->reference.data(), out->count / longest);
  }
  if (reused) {
    absl::StrAppend(&notes,
                    "; the baseline's inputs, reference and errors are this node's from an "
                    "earlier sweep with a byte-identical baseline runner");
  }

  const double growth_limit =
      suite.max_growth_vs_baseline() > 0 ? suite.max_growth_vs_baseline() : 2.0;
  std::vector<std::string> points;
  for (size_t i = 0; i < lengths.size(); ++i) {
    points.push_back(absl::StrFormat("%d: %.2e vs %.2e", lengths[i], report.candidate.rel_rms[i],
                                     report.baseline.rel_rms[i]));
  }
  const std::string curve = absl::StrJoin(points, ", ");
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (!(report.candidate.rel_rms[i] <= suite.max_rel_rms())) {
      report.outcome = Outcome::kFailed;
      report.message = absl::StrFormat(
          "%s: rel_rms %.2e at %d tokens exceeds the bound %.1e (candidate vs baseline by "
          "length: %s%s)",
          suite.name(), report.candidate.rel_rms[i], lengths[i], suite.max_rel_rms(), curve, notes);
      return report;
    }
  }
  // A floor keeps an exact baseline (error 0) from making any error "growth".
  const double base = std::max(report.baseline.rel_rms.back(), 1e-9);
  const double growth = report.candidate.rel_rms.back() / base;
  if (growth > growth_limit) {
    report.outcome = Outcome::kFailed;
    report.message = absl::StrFormat(
        "%s: at %d tokens the candidate's error %.2e is %.1fx the baseline's %.2e (limit "
        "%.1fx), though under the absolute bound %.1e: a precision loss a short-context test "
        "misses (candidate vs baseline by length: %s%s)",
        suite.name(), longest, report.candidate.rel_rms.back(), growth,
        report.baseline.rel_rms.back(), growth_limit, suite.max_rel_rms(), curve, notes);
    return report;
  }
  report.message = absl::StrFormat("%s: within %.1e and %.1fx of the baseline (%s%s)", suite.name(),
                                   suite.max_rel_rms(), growth_limit, curve, notes);
  return report;
}

}  // namespace densegate::harness
