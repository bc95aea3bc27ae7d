#include "harness/runner/precision_suite.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "harness/runner/inputs.h"
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

int64_t IntParam(const v1::PrecisionSuite& s, const char* key, int64_t fallback) {
  auto it = s.params().find(key);
  return it == s.params().end() ? fallback : static_cast<int64_t>(it->second);
}

// The runner shape of one sequence of `tokens` tokens.
nlohmann::json Shape(const v1::PrecisionSuite& s, int64_t tokens) {
  nlohmann::json shape = {{"heads", IntParam(s, "heads", 1)},
                          {"k", IntParam(s, "k", 128)},
                          {"v", IntParam(s, "v", 128)}};
  if (s.op() == "kda_decode") {
    shape["batch"] = 1;
    shape["steps"] = tokens;
  } else {
    shape["tokens"] = tokens;
  }
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
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [k, v] : suite.params()) params[k] = v;
  const nlohmann::json shape = Shape(suite, longest);

  struct Arm {
    const char* name;
    const std::string* dir;
    bool reference;
    std::unique_ptr<RunnerClient> client;
  };
  Arm arms[] = {{"reference", &setup.baseline_dir, true, nullptr},
                {"baseline", &setup.baseline_dir, false, nullptr},
                {"candidate", &setup.candidate_dir, false, nullptr}};
  // The candidate arm last, left out when its runner is the baseline's.
  const absl::Span<Arm> run_arms(arms, setup.candidate_runner_identical ? 2 : 3);
  RunnerLayout layout;
  for (Arm& arm : run_arms) {
    auto c = RunnerClient::Start(setup.launcher, *arm.dir, suite.runner(),
                                 absl::StrFormat("%s-%s.err", setup.log_prefix, arm.name),
                                 setup.cpus, kCallTimeout * 2);
    if (!c.ok()) {
      return Report(arm.dir == &setup.candidate_dir ? Outcome::kFailed : Outcome::kInfrastructure,
                    absl::StrFormat("%s runner did not start: %s", arm.name, c.status().message()));
    }
    arm.client = std::move(*c);
  }
  auto described = arms[0].client->Describe(suite.op(), shape, params);
  if (!described.ok()) {
    return Report(Outcome::kInfrastructure,
                  absl::StrFormat("the baseline runner cannot describe %s: %s", suite.op(),
                                  described.status().message()));
  }
  layout = *described;
  const RunnerBuffer* out = nullptr;
  for (const RunnerBuffer& b : layout.buffers) {
    if (b.name == "out") out = &b;
  }
  if (out == nullptr || out->count % longest != 0) {
    return Report(Outcome::kInfrastructure, "the runner's layout has no per-token \"out\" buffer");
  }
  std::vector<std::vector<float>> values;
  if (auto s = DrawInputs(layout, HiddenSeed(setup.salt), &values); !s.ok()) {
    return Report(Outcome::kInfrastructure, std::string(s.message()));
  }
  for (Arm& arm : run_arms) {
    if (auto s = arm.client->Prepare(layout, arm.reference); !s.ok()) {
      return Report(Outcome::kInfrastructure, std::string(s.message()));
    }
    for (size_t i = 0; i < layout.buffers.size(); ++i) {
      const RunnerBuffer& b = layout.buffers[i];
      if (b.role == BufferRole::kOutput) {
        std::memset(arm.client->Buffer(b), 0xFF, b.count * 4);
      } else {
        std::memcpy(arm.client->Buffer(b), values[i].data(), b.count * 4);
      }
    }
    absl::StatusOr<double> t = arm.client->Run(layout, arm.reference, kCallTimeout);
    if (!t.ok()) {
      return Report(arm.dir == &setup.candidate_dir ? Outcome::kFailed : Outcome::kInfrastructure,
                    absl::StrFormat("%s runner failed the %d-token sweep: %s", arm.name, longest,
                                    t.status().message()));
    }
  }
  const int64_t per_token = out->count / longest;
  const double* ref = arms[0].client->Result(*out);
  PrecisionReport report;
  report.baseline = Curve(lengths, arms[1].client->Buffer(*out), ref, per_token);
  report.candidate = setup.candidate_runner_identical
                         ? report.baseline
                         : Curve(lengths, arms[2].client->Buffer(*out), ref, per_token);
  const std::string same_runner =
      setup.candidate_runner_identical
          ? "; the candidate's runner is byte-identical to the baseline's: its errors are the "
            "baseline's, not computed again"
          : "";

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
          suite.name(), report.candidate.rel_rms[i], lengths[i], suite.max_rel_rms(), curve,
          same_runner);
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
        "misses (candidate vs baseline by length: %s)",
        suite.name(), longest, report.candidate.rel_rms.back(), growth,
        report.baseline.rel_rms.back(), growth_limit, suite.max_rel_rms(), curve);
    return report;
  }
  report.message = absl::StrFormat("%s: within %.1e and %.1fx of the baseline (%s%s)", suite.name(),
                                   suite.max_rel_rms(), growth_limit, curve, same_runner);
  return report;
}

}  // namespace densegate::harness
