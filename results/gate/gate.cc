#include "results/gate/gate.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_format.h"
#include "results/stats/multiplicity.h"
#include "results/stats/paired.h"
#include "results/stats/rank_tests.h"

namespace densegate::results {
namespace {

// Share of the error budget spent at the first look (see gate.h).
constexpr double kFirstLookShare = 5.0 / 8.0;
// Growth of the pair count between looks.
constexpr double kLookGrowth = 1.5;
constexpr int kBootstrapResamples = 2000;

absl::Status CheckParameters(const GateParameters& p) {
  auto bad = [](const char* name, double v, const char* want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gate policy %s = %g: must be %s", name, v, want));
  };
  if (!(p.min_effect >= 0 && p.min_effect < 1)) {
    return bad("min_effect", p.min_effect, "in [0, 1)");
  }
  if (!(p.confidence > 0.5 && p.confidence < 1)) {
    return bad("confidence", p.confidence, "in (0.5, 1)");
  }
  if (!(p.regression_budget >= 0 && p.regression_budget < 1)) {
    return bad("regression_budget", p.regression_budget, "in [0, 1)");
  }
  if (p.min_pairs < 2) return bad("min_pairs", p.min_pairs, ">= 2");
  if (p.max_pairs < p.min_pairs) return bad("max_pairs", p.max_pairs, ">= min_pairs");
  if (!(p.claim_tolerance > 0 && p.claim_tolerance <= 1)) {
    return bad("claim_tolerance", p.claim_tolerance, "in (0, 1]");
  }
  if (!(p.sanity_ceiling > 1)) return bad("sanity_ceiling", p.sanity_ceiling, "> 1");
  if (!(p.error_share > 0 && p.error_share <= 1)) {
    return bad("error_share", p.error_share, "in (0, 1]");
  }
  if (!p.second_part && p.error_share < 1 && !(p.error_share > kFirstLookShare)) {
    return bad("error_share", p.error_share, "above 5/8 for a first part (its first look's share)");
  }
  return absl::OkStatus();
}

std::string Ratio(double log_ratio) {
  if (std::isinf(log_ratio)) return log_ratio > 0 ? "+inf" : "0";
  return absl::StrFormat("%.3fx", std::exp(log_ratio));
}

// One metric's analysis at one look.
struct MetricLook {
  const MetricSamples* samples;
  double estimate;  // Hodges-Lehmann, log units.
  Interval bounds;  // At the look's alpha, log units.
  double p_regression;
  bool regressed = false;
  bool identical() const { return samples->inputs_identical; }
};

struct LookDecision {
  bool stop = false;
  v1::Decision decision = v1::DECISION_UNSPECIFIED;
  std::vector<v1::Reason> reasons;
};

v1::Reason MakeReason(v1::ReasonCode code, v1::StageKind stage,
                      const std::string& metric, std::string message) {
  v1::Reason r;
  r.set_code(code);
  r.set_stage(stage);
  r.set_metric(metric);
  r.set_message(std::move(message));
  return r;
}

std::string Describe(const MetricLook& m, int n) {
  if (m.identical()) {
    return absl::StrFormat("%s: not measured, its benchmark's inputs are byte-identical in "
                           "both arms (unchanged)",
                           m.samples->name);
  }
  return absl::StrFormat("%s: speedup %s [%s, %s] over %d pairs",
                         m.samples->name, Ratio(m.estimate), Ratio(m.bounds.low),
                         Ratio(m.bounds.high), n);
}


// The evaluation's metrics, validated once, with their paired log-ratios.
struct PreparedMetrics {
  std::vector<std::vector<double>> ratios;  // Empty for inputs-identical metrics.
  std::map<std::string, size_t> by_name;
  std::vector<int> confirmer;  // Index of each metric's confirmed_by, or -1.
  int available = 0;           // Pairs every measured metric has.
  int measured = 0;            // Metrics measured (not inputs-identical).
  // Measured primaries, the ways to accept that share the Bonferroni split.
  int measured_primaries = 0;
};

absl::StatusOr<PreparedMetrics> PrepareMetrics(const GateInput& input) {
  if (input.metrics.empty()) {
    return absl::InvalidArgumentError(
        "no metrics to decide on: the manifest declares no benchmarks");
  }
  PreparedMetrics out;
  out.available = input.params.max_pairs;
  int primaries = 0;
  for (size_t i = 0; i < input.metrics.size(); ++i) {
    const MetricSamples& m = input.metrics[i];
    if (m.direction != v1::LOWER_IS_BETTER && m.direction != v1::HIGHER_IS_BETTER) {
      return absl::InvalidArgumentError(absl::StrFormat("metric %s has no direction", m.name));
    }
    out.by_name[m.name] = i;
    if (m.primary) ++primaries;
    if (m.inputs_identical) {
      if (!m.baseline.empty() || !m.candidate.empty()) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "metric %s is marked inputs-identical (not measured) but has samples", m.name));
      }
      out.ratios.emplace_back();
      continue;
    }
    ++out.measured;
    if (m.primary) ++out.measured_primaries;
    auto r = PairedLogRatios(m.baseline, m.candidate,
                             m.direction == v1::LOWER_IS_BETTER ? Better::kLower
                                                                 : Better::kHigher);
    if (!r.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("metric %s: %s", m.name, r.status().message()));
    }
    out.available = std::min<int>(out.available, r->size());
    out.ratios.push_back(*std::move(r));
  }
  out.confirmer.assign(input.metrics.size(), -1);
  for (size_t i = 0; i < input.metrics.size(); ++i) {
    const std::string& c = input.metrics[i].confirmed_by;
    if (c.empty()) continue;
    auto it = out.by_name.find(c);
    if (it == out.by_name.end() || it->second == i) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "metric %s: confirmed_by names %s, which is %s", input.metrics[i].name, c,
          it == out.by_name.end() ? "not a metric of this evaluation" : "the metric itself"));
    }
    out.confirmer[i] = static_cast<int>(it->second);
    // An accept through a confirmed primary metric needs its confirmer's
    // bound at the same level: when that is a measured primary too, the two
    // are one way to accept, not two, and share one Bonferroni share.
    const MetricSamples& m = input.metrics[i];
    const MetricSamples& by = input.metrics[it->second];
    if (m.primary && !m.inputs_identical && by.primary && !by.inputs_identical) {
      --out.measured_primaries;
    }
  }
  if (input.policy == v1::GAIN && primaries == 0) {
    return absl::InvalidArgumentError(
        "policy GAIN needs a primary metric; none of the metrics is primary");
  }
  for (const v1::Claim& claim : input.claims) {
    if (out.by_name.count(claim.metric()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("claim on unknown metric \"%s\"", claim.metric()));
    }
    if (!(claim.min_speedup() > 0) || !std::isfinite(claim.min_speedup())) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "claim on %s: claimed speedup %g must be > 0", claim.metric(), claim.min_speedup()));
    }
  }
  return out;
}

// One look of the plan at n pairs: every metric's analysis (the
// constructor), the rules that decide at it (Decide), and the verdict's
// numbers when they do (Report).
class Look {
 public:
  Look(const GateInput& input, const PreparedMetrics& prepared, int n, double alpha)
      : input_(input),
        prepared_(prepared),
        p_(input.params),
        n_(n),
        gain_threshold_(std::log1p(p_.min_effect)),
        regression_floor_(-std::log1p(p_.regression_budget)) {
    const double primary_alpha = alpha / std::max(prepared.measured_primaries, 1);
    std::vector<double> p_regression;
    for (size_t i = 0; i < input.metrics.size(); ++i) {
      if (input.metrics[i].inputs_identical) {
        metrics_.push_back(MetricLook{&input.metrics[i], 0, {0, 0}, 1});
        continue;
      }
      absl::Span<const double> r(prepared.ratios[i].data(), n);
      MetricLook m{&input.metrics[i], HodgesLehmann(r), {}, 0};
      const double a = m.samples->primary ? primary_alpha : alpha;
      m.bounds = WilcoxonBounds(r, a, a);
      m.p_regression = WilcoxonSignedRank(r, regression_floor_).p_less;
      p_regression.push_back(m.p_regression);
      metrics_.push_back(m);
    }
    std::vector<bool> regressed = BenjaminiHochberg(p_regression, alpha);
    for (size_t i = 0, j = 0; i < metrics_.size(); ++i) {
      if (!metrics_[i].identical()) metrics_[i].regressed = regressed[j++];
    }
  }

  LookDecision Decide(bool last) const {
    LookDecision d;
    RejectRegressions(&d);
    RejectBenchmarkOnlyGains(&d);
    if (!d.stop && input_.policy == v1::GAIN) {
      DecideGain(last, &d);
    } else if (!d.stop) {
      DecideNoRegression(last, &d);
    }
    if (!d.stop && last) Inconclusive(&d);
    return d;
  }

  void Report(GateResult* result) const {
    for (size_t i = 0; i < metrics_.size(); ++i) ReportMetric(i, result);
    for (const v1::Claim& claim : input_.claims) ReportClaim(claim, result);
  }

 private:
  const MetricLook& ByName(const std::string& name) const {
    return metrics_[prepared_.by_name.at(name)];
  }
  // The trusted metric confirming m, or null.
  const MetricLook* Confirming(const MetricLook& m) const {
    const int c = prepared_.confirmer[&m - metrics_.data()];
    return c < 0 ? nullptr : &metrics_[c];
  }
  // Whether m's confirmer (if any) shows a gain, or rules one out. Only its
  // sign counts, not its size: the runner's timing includes its own
  // per-call overhead, which dilutes an honest speedup toward 1. A
  // confirmer with identical inputs ran the same program in both arms: it
  // shows no gain, even at min_effect 0.
  bool Confirmed(const MetricLook& m) const {
    const MetricLook* c = Confirming(m);
    return c == nullptr || (!c->identical() && c->bounds.low > gain_threshold_);
  }
  bool Refuted(const MetricLook& m) const {
    const MetricLook* c = Confirming(m);
    return c != nullptr && (c->identical() || c->bounds.high < gain_threshold_);
  }
  // A metric is cleared when its slowdown is bounded within the budget.
  bool Cleared(const MetricLook& m) const { return m.bounds.low > regression_floor_; }
  bool AllCleared() const {
    return std::all_of(metrics_.begin(), metrics_.end(),
                       [&](const MetricLook& m) { return Cleared(m); });
  }
  // Primary metrics whose gain is verified at this look (policy GAIN).
  std::vector<const MetricLook*> Gains() const {
    std::vector<const MetricLook*> gains;
    for (const MetricLook& m : metrics_) {
      if (m.samples->primary && m.bounds.low > gain_threshold_ && Confirmed(m)) {
        gains.push_back(&m);
      }
    }
    return gains;
  }
  bool ClaimVerified(const v1::Claim& c, const MetricLook& m) const {
    return m.bounds.low >= std::log(c.min_speedup() * p_.claim_tolerance) && Confirmed(m);
  }
  // Claims hold an accept back until each is verified or refuted.
  bool ClaimsDecided() const {
    for (const v1::Claim& c : input_.claims) {
      const MetricLook& m = ByName(c.metric());
      const double target = std::log(c.min_speedup() * p_.claim_tolerance);
      if (!ClaimVerified(c, m) && !(m.bounds.high < target) && !Refuted(m)) return false;
    }
    return true;
  }

  void RejectRegressions(LookDecision* d) const {
    for (const MetricLook& m : metrics_) {
      if (!m.regressed) continue;
      d->stop = true;
      d->decision = v1::REJECT;
      d->reasons.push_back(MakeReason(
          v1::REGRESSION, m.samples->stage, m.samples->name,
          absl::StrFormat("%s: slower beyond the %.1f%% budget (p = %.2g, "
                          "Benjamini-Hochberg across %d metrics)",
                          Describe(m, n_), 100 * p_.regression_budget, m.p_regression,
                          prepared_.measured)));
    }
  }

  // A benchmark-only gain: the trusted measurement of the same computation
  // rules out the gain the candidate's benchmark binary shows.
  void RejectBenchmarkOnlyGains(LookDecision* d) const {
    for (const MetricLook& m : metrics_) {
      if (m.identical() || !(m.bounds.low > gain_threshold_) || !Refuted(m)) continue;
      d->stop = true;
      d->decision = v1::REJECT;
      d->reasons.push_back(MakeReason(
          v1::BENCHMARK_ONLY_GAIN, m.samples->stage, m.samples->name,
          absl::StrFormat("%s by the candidate's benchmark binary, but the trusted runner's "
                          "timing of the same computation, %s, rules out the %.1f%% minimum "
                          "effect: the benchmark binary computes less than the runner "
                          "verifies (a benchmark-only gain)",
                          Describe(m, n_), Describe(*Confirming(m), n_), 100 * p_.min_effect)));
    }
  }

  void DecideGain(bool last, LookDecision* d) const {
    const std::vector<const MetricLook*> gains = Gains();
    if (!gains.empty() && AllCleared() && (ClaimsDecided() || last)) {
      d->stop = true;
      d->decision = v1::ACCEPT;
      for (const MetricLook* m : gains) {
        d->reasons.push_back(MakeReason(
            v1::VERIFIED, m->samples->stage, m->samples->name,
            absl::StrFormat("%s: lower bound clears the %.1f%% minimum effect",
                            Describe(*m, n_), 100 * p_.min_effect)));
      }
      return;
    }
    // A metric with identical inputs cannot gain, even at min_effect 0.
    for (const MetricLook& m : metrics_) {
      if (m.samples->primary && !m.identical() && !(m.bounds.high < gain_threshold_)) return;
    }
    d->stop = true;
    d->decision = v1::REJECT;
    for (const MetricLook& m : metrics_) {
      if (!m.samples->primary) continue;
      d->reasons.push_back(MakeReason(
          v1::NO_VERIFIED_GAIN, m.samples->stage, m.samples->name,
          m.identical() ? Describe(m, n_) + ": no gain"
                        : absl::StrFormat("%s: upper bound below the %.1f%% minimum "
                                          "effect, no gain",
                                          Describe(m, n_), 100 * p_.min_effect)));
    }
  }

  void DecideNoRegression(bool last, LookDecision* d) const {
    if (!AllCleared() || !(ClaimsDecided() || last)) return;
    d->stop = true;
    d->decision = v1::ACCEPT;
    const int measured = prepared_.measured;
    std::string message =
        measured == 0
            ? "no benchmark's inputs changed: every metric is unchanged by construction"
            : absl::StrFormat("every metric's slowdown is bounded within the %.1f%% budget "
                              "over %d pairs",
                              100 * p_.regression_budget, n_);
    if (measured > 0 && measured < static_cast<int>(metrics_.size())) {
      absl::StrAppendFormat(&message, " (%d not measured: their inputs were identical)",
                            metrics_.size() - measured);
    }
    d->reasons.push_back(
        MakeReason(v1::VERIFIED, metrics_.front().samples->stage, "", std::move(message)));
  }

  // The last look decided nothing: say what each undecided metric lacks.
  void Inconclusive(LookDecision* d) const {
    d->stop = true;
    d->decision = v1::INCONCLUSIVE;
    // Once one primary metric's gain is verified, the others need not gain:
    // what holds the accept back is a slowdown not ruled out.
    const bool gain_verified = input_.policy == v1::GAIN && !Gains().empty();
    for (const MetricLook& m : metrics_) {
      const bool gain_pending = input_.policy == v1::GAIN && m.samples->primary &&
                                !gain_verified && !m.identical();
      const bool gain_open = gain_pending && !(m.bounds.low > gain_threshold_);
      const MetricLook* c = Confirming(m);
      if (gain_pending && !gain_open && c != nullptr) {
        d->reasons.push_back(MakeReason(
            v1::UNDECIDED, m.samples->stage, m.samples->name,
            absl::StrFormat("%s: a gain by the candidate's benchmark binary, not confirmed "
                            "by the trusted runner's %s at the %d-pair budget",
                            Describe(m, n_), Describe(*c, n_), p_.max_pairs)));
      } else if (gain_open) {
        d->reasons.push_back(MakeReason(
            v1::UNDECIDED, m.samples->stage, m.samples->name,
            absl::StrFormat("%s: interval still straddles the %s gain "
                            "threshold at the %d-pair budget",
                            Describe(m, n_), Ratio(gain_threshold_), p_.max_pairs)));
      } else if (!Cleared(m)) {
        d->reasons.push_back(MakeReason(
            v1::UNDECIDED, m.samples->stage, m.samples->name,
            absl::StrFormat("%s: a slowdown beyond the %.1f%% budget is not "
                            "ruled out at the %d-pair budget",
                            Describe(m, n_), 100 * p_.regression_budget, p_.max_pairs)));
      }
    }
  }

  // Metric i's comparison; a speedup above its plausible ceiling turns an
  // accept into a verdict held for review.
  void ReportMetric(size_t i, GateResult* result) const {
    const MetricLook& m = metrics_[i];
    const MetricSamples& s = *m.samples;
    v1::MetricComparison c;
    c.set_metric(s.name);
    c.set_unit(s.unit);
    c.set_direction(s.direction);
    c.set_primary(s.primary);
    c.set_stage(s.stage);
    c.set_roofline_speedup(s.roofline_speedup);
    c.set_confirmed_by(s.confirmed_by);
    if (m.identical()) {
      c.set_inputs_identical(true);
      c.set_speedup(1);
      c.set_ci_low(1);
      c.set_ci_high(1);
      c.set_p_value(1);
      c.set_bootstrap_low(1);
      c.set_bootstrap_high(1);
      result->metrics.push_back(std::move(c));
      return;
    }
    absl::Span<const double> r(prepared_.ratios[i].data(), n_);
    c.set_baseline(Median(std::vector<double>(s.baseline.begin(), s.baseline.begin() + n_)));
    c.set_candidate(Median(std::vector<double>(s.candidate.begin(), s.candidate.begin() + n_)));
    c.set_speedup(std::exp(m.estimate));
    c.set_ci_low(std::exp(m.bounds.low));
    c.set_ci_high(std::exp(m.bounds.high));
    c.set_n_pairs(n_);
    c.set_p_value(WilcoxonSignedRank(r, 0).p_greater);
    c.set_significant(m.bounds.low > 0 || m.bounds.high < 0 || m.regressed);
    Interval boot = BootstrapMedianInterval(r, 1 - p_.confidence, kBootstrapResamples,
                                            input_.seed + i);
    c.set_bootstrap_low(std::exp(boot.low));
    c.set_bootstrap_high(std::exp(boot.high));
    const double ceiling = s.roofline_speedup > 0 ? std::min(p_.sanity_ceiling, s.roofline_speedup)
                                                  : p_.sanity_ceiling;
    if (c.speedup() > ceiling) {
      c.set_flagged_for_review(true);
      if (result->decision == v1::ACCEPT) result->decision = v1::INCONCLUSIVE;
      result->reasons.push_back(MakeReason(
          v1::NEEDS_REVIEW, s.stage, s.name,
          absl::StrFormat("%s: above the plausible ceiling %.1fx (%s); a "
                          "human must confirm it",
                          Describe(m, n_), ceiling,
                          s.roofline_speedup > 0 && s.roofline_speedup < p_.sanity_ceiling
                              ? "roofline"
                              : "sanity ceiling")));
    }
    result->metrics.push_back(std::move(c));
  }

  void ReportClaim(const v1::Claim& claim, GateResult* result) const {
    const MetricLook& m = ByName(claim.metric());
    v1::ClaimResult cr;
    cr.set_metric(claim.metric());
    cr.set_claimed(claim.min_speedup());
    cr.set_ci_low(std::exp(m.bounds.low));
    cr.set_ci_high(std::exp(m.bounds.high));
    const double target = claim.min_speedup() * p_.claim_tolerance;
    cr.set_verified(ClaimVerified(claim, m));
    std::string evidence =
        m.identical() ? Describe(m, n_)
                      : absl::StrFormat("measured %s [%s, %s], needs a lower bound >= %.3fx",
                                        Ratio(m.estimate), Ratio(m.bounds.low),
                                        Ratio(m.bounds.high), target);
    if (const MetricLook* c = Confirming(m); c != nullptr) {
      absl::StrAppend(&evidence, Confirmed(m) ? "; confirmed by " : "; not confirmed by ",
                      Describe(*c, n_));
    }
    result->reasons.push_back(MakeReason(
        cr.verified() ? v1::VERIFIED : v1::CLAIM_NOT_VERIFIED, m.samples->stage, claim.metric(),
        absl::StrFormat("claim %s >= %.2fx %s: %s", claim.metric(), claim.min_speedup(),
                        cr.verified() ? "verified" : "not verified", evidence)));
    result->claims.push_back(std::move(cr));
  }

  const GateInput& input_;
  const PreparedMetrics& prepared_;
  const GateParameters& p_;
  const int n_;
  const double gain_threshold_;
  const double regression_floor_;
  std::vector<MetricLook> metrics_;
};

}  // namespace

absl::StatusOr<GateParameters> ResolveGateParameters(const v1::GatePolicy& policy) {
  GateParameters p;
  if (policy.min_effect() != 0) p.min_effect = policy.min_effect();
  if (policy.confidence() != 0) p.confidence = policy.confidence();
  if (policy.regression_budget() != 0) p.regression_budget = policy.regression_budget();
  if (policy.min_pairs() != 0) p.min_pairs = policy.min_pairs();
  if (policy.max_pairs() != 0) p.max_pairs = policy.max_pairs();
  if (policy.claim_tolerance() != 0) p.claim_tolerance = policy.claim_tolerance();
  if (policy.sanity_ceiling() != 0) p.sanity_ceiling = policy.sanity_ceiling();
  if (policy.max_calibration_noise() != 0) {
    p.max_calibration_noise = policy.max_calibration_noise();
  }
  if (policy.min_effect() < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gate policy min_effect = %g: must be in [0, 1)", policy.min_effect()));
  }
  absl::Status status = CheckParameters(p);
  if (!status.ok()) return status;
  return p;
}

v1::GatePolicy ToProto(const GateParameters& p) {
  v1::GatePolicy g;
  g.set_min_effect(p.min_effect);
  g.set_confidence(p.confidence);
  g.set_regression_budget(p.regression_budget);
  g.set_min_pairs(p.min_pairs);
  g.set_max_pairs(p.max_pairs);
  g.set_claim_tolerance(p.claim_tolerance);
  g.set_sanity_ceiling(p.sanity_ceiling);
  g.set_max_calibration_noise(p.max_calibration_noise);
  return g;
}

GateParameters PartParameters(GateParameters params, double error_share, bool second_part) {
  params.error_share = error_share > 0 && error_share < 1 ? error_share : 1;
  params.second_part = second_part;
  if (second_part) {
    params.min_pairs += params.max_pairs;
    params.max_pairs *= 2;
  }
  return params;
}

SequentialPlan PlanLooks(const GateParameters& params) {
  SequentialPlan plan;
  double alpha = (1 - params.confidence) / 2;
  for (double n = params.min_pairs;;) {
    int pairs = std::min(static_cast<int>(std::ceil(n)), params.max_pairs);
    if (plan.pairs.empty() || pairs > plan.pairs.back()) plan.pairs.push_back(pairs);
    if (pairs >= params.max_pairs) break;
    n *= kLookGrowth;
  }
  size_t looks = plan.pairs.size();
  // A second part spends its share in the plan's shape; a first part keeps
  // its first look's share and spends less on the later ones.
  const double spent = alpha * params.error_share;
  const double first = params.second_part ? spent * kFirstLookShare : alpha * kFirstLookShare;
  if (looks == 1) {
    plan.alpha = {spent};
  } else {
    plan.alpha.assign(looks, (spent - first) / (looks - 1));
    plan.alpha[0] = first;
  }
  return plan;
}

absl::StatusOr<GateResult> Evaluate(const GateInput& input) {
  absl::Status status = CheckParameters(input.params);
  if (!status.ok()) return status;
  if (input.policy != v1::GAIN && input.policy != v1::NO_REGRESSION) {
    return absl::InvalidArgumentError(
        "policy must be GAIN or NO_REGRESSION (resolve the kind's default first)");
  }
  GateResult result;
  if (!input.stage_failures.empty()) {
    result.decision = v1::REJECT;
    result.reasons = input.stage_failures;
    return result;
  }
  absl::StatusOr<PreparedMetrics> prepared = PrepareMetrics(input);
  if (!prepared.ok()) return prepared.status();

  const GateParameters& p = input.params;
  SequentialPlan plan = PlanLooks(p);
  // Nothing to measure: one look, at zero pairs.
  if (prepared->measured == 0) plan = {{0}, {(1 - p.confidence) / 2}};
  for (size_t l = 0; l < plan.pairs.size(); ++l) {
    const int n = plan.pairs[l];
    if (prepared->available < n) {
      result.needs_more_pairs = true;
      result.next_pairs = n;
      return result;
    }
    const Look look(input, *prepared, n, plan.alpha[l]);
    LookDecision d = look.Decide(/*last=*/l + 1 == plan.pairs.size());
    if (!d.stop) continue;
    // The decision stands at this look.
    result.look = static_cast<int>(l) + 1;
    result.pairs_used = n;
    result.decision = d.decision;
    result.reasons = std::move(d.reasons);
    look.Report(&result);
    return result;
  }
  return absl::InternalError("gate plan has no looks");  // PlanLooks never does.
}

}  // namespace densegate::results
