#include "results/report/report.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "results/store/store.h"
#include "testing/test_util.h"

namespace densegate::results {
namespace {

using test::TestTmpDir;

using ::testing::HasSubstr;
using ::testing::Not;

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> s = OpenStore("sqlite::memory:");
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
    v1::NodeDimensions d;
    d.set_accelerator_kind("cpu");
    d.set_fingerprint("fp");
    ASSERT_TRUE(store_->RegisterNode("node-a", d).ok());
  }

  // What one finished evaluation measured and how it ended.
  struct Evaluated {
    std::string id;
    v1::Decision decision = v1::INCONCLUSIVE;
    // kda.fused: the candidate's value in ns and its speedup.
    double value = 100;
    double speedup = 1;
    v1::ReasonCode code = v1::REASON_CODE_UNSPECIFIED;
    std::string campaign, hypothesis;
    std::string target_branch = "main";
    std::string baseline_sha = "base";
    std::string candidate_sha;  // Empty: id + "-sha-0123456789".
    // Set: the evaluation landed this commit on its branch.
    std::string merged_sha;
    // kda.fused samples per pair (baseline, candidate); empty: none.
    std::vector<std::pair<double, double>> pairs;
    // Set: the node uploaded a feedback bundle with this headline.
    std::string feedback_headline;
  };

  // One finished evaluation of `id` targeting main, whose verdict measured
  // kda.fused at `value` ns with `speedup`; landed (fast-forward) when
  // `merge`.
  std::string Finish(const std::string& id, v1::Decision decision, double value, double speedup,
                     v1::ReasonCode code = v1::REASON_CODE_UNSPECIFIED, bool merge = false,
                     const std::string& campaign = "", const std::string& hypothesis = "") {
    Evaluated e;
    e.id = id;
    e.decision = decision;
    e.value = value;
    e.speedup = speedup;
    e.code = code;
    e.campaign = campaign;
    e.hypothesis = hypothesis;
    if (merge) e.merged_sha = id + "-sha-0123456789";
    return Finish(e);
  }

  std::string Finish(const Evaluated& spec) {
    SubmitParams p;
    p.candidate.set_id(spec.id);
    p.candidate.set_repo("/repos/workload");
    p.candidate.set_target_branch(spec.target_branch);
    p.candidate.set_baseline_sha(spec.baseline_sha);
    p.candidate.set_candidate_sha(spec.candidate_sha.empty() ? spec.id + "-sha-0123456789"
                                                             : spec.candidate_sha);
    p.candidate.set_kind(v1::EXPERIMENT);
    p.candidate.set_submitter("agent:campaign-1");
    p.candidate.set_manifest_hash("m");
    p.candidate.set_campaign(spec.campaign);
    p.candidate.set_hypothesis(spec.hypothesis);
    absl::StatusOr<SubmitResult> submitted = store_->Submit(p);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    ClaimRequest claim;
    claim.node_id = "node-a";
    claim.dimensions.set_accelerator_kind("cpu");
    claim.lease_duration = absl::Minutes(1);
    absl::StatusOr<std::vector<v1::Lease>> leases = store_->ClaimJobs(claim);
    EXPECT_TRUE(leases.ok() && leases->size() == 1);
    const LeaseRef lease = {(*leases)[0].id(), "node-a"};
    std::vector<v1::Sample> samples;
    for (size_t i = 0; i < spec.pairs.size(); ++i) {
      for (v1::Arm arm : {v1::BASELINE, v1::CANDIDATE}) {
        v1::Sample& sample = samples.emplace_back();
        sample.set_metric("kda.fused");
        sample.set_arm(arm);
        sample.set_pair_index(static_cast<int>(i));
        sample.set_value(arm == v1::BASELINE ? spec.pairs[i].first : spec.pairs[i].second);
        sample.set_unit("ns");
      }
    }
    if (!samples.empty()) {
      EXPECT_TRUE(store_->AppendSamples(lease, samples).ok());
    }
    v1::Verdict v;
    v.set_decision(spec.decision);
    v.set_policy(v1::GAIN);
    v.mutable_provenance()->mutable_policy_parameters()->set_max_calibration_noise(0.03);
    v1::MetricComparison* m = v.add_metrics();
    m->set_metric("kda.fused");
    m->set_unit("ns");
    m->set_primary(true);
    m->set_baseline(spec.value * spec.speedup);
    m->set_candidate(spec.value);
    m->set_speedup(spec.speedup);
    m->set_ci_low(spec.speedup * 0.95);
    m->set_ci_high(spec.speedup * 1.05);
    m->set_n_pairs(12);
    if (spec.code == v1::PRECISION_FAILED) {
      // The stage record of a long-context sweep: the candidate's error
      // grows 30x past the baseline's.
      v1::Stage* stage = v.add_stages();
      stage->set_kind(v1::PRECISION);
      stage->set_status(v1::STAGE_FAILED);
      v1::PrecisionCurve* c = stage->add_curves();
      c->set_suite("decode-long-context");
      c->set_op("kda_decode");
      c->set_max_rel_rms(2e-3);
      for (int64_t len : {1024, 4096, 16384, 65536}) {
        v1::PrecisionPoint* b = c->add_baseline();
        b->set_length(len);
        b->set_rel_rms(1e-6 * len / 1024.0);
        v1::PrecisionPoint* p = c->add_candidate();
        p->set_length(len);
        p->set_rel_rms(3e-5 * len / 1024.0);
      }
    }
    if (spec.code != v1::REASON_CODE_UNSPECIFIED) {
      v1::Reason* r = v.add_reasons();
      r->set_code(spec.code);
      if (spec.code == v1::REGRESSION) r->set_metric("kda.fused");
      r->set_message(absl::StrCat(spec.id, ": ", v1::ReasonCode_Name(spec.code)));
    }
    if (!spec.feedback_headline.empty()) {
      const std::string summary =
          nlohmann::json({{"schema_version", 1}, {"headline", spec.feedback_headline}}).dump();
      v1::FeedbackBundle bundle;
      v1::FeedbackFile* f = bundle.add_files();
      f->set_path("feedback.json");
      f->set_content(summary);
      EXPECT_TRUE(store_->PutFeedback(lease, bundle, summary, FeedbackPolicy{}).ok());
    }
    EXPECT_TRUE(store_->FinishLease(lease, v).ok());
    const std::string eval = submitted->evaluation.id();
    if (!spec.merged_sha.empty()) {
      EXPECT_TRUE(store_->EnqueueMerge(eval, "test").ok());
      v1::MergeStatus s;
      s.set_state(v1::MERGED);
      s.set_merged_sha(spec.merged_sha);
      EXPECT_TRUE(store_->UpdateMerge(eval, s, "test").ok());
    }
    return eval;
  }

  std::unique_ptr<Store> store_;
};

TEST_F(ReportTest, HeadlineRejectionsChangePointsAndNodesFromTheStore) {
  // Ten verdicts: the metric's value halves from the sixth on.
  Finish("c0", v1::INCONCLUSIVE, 100, 1.0);
  Finish("c1", v1::ACCEPT, 101, 1.5, v1::VERIFIED, /*merge=*/true);
  Finish("c2", v1::REJECT, 99, 0.7, v1::GAMING);
  Finish("c3", v1::INCONCLUSIVE, 100, 1.0);
  Finish("c4", v1::ACCEPT, 102, 2.0, v1::VERIFIED, /*merge=*/true);
  const std::string drop = Finish("c5", v1::REJECT, 50, 0.9, v1::PRECISION_FAILED);
  Finish("c6", v1::INCONCLUSIVE, 51, 1.0);
  Finish("c7", v1::ACCEPT, 49, 1.1, v1::VERIFIED, /*merge=*/true);
  Finish("c8", v1::INCONCLUSIVE, 50, 1.0);
  Finish("c9", v1::INCONCLUSIVE, 52, 1.0);

  ReportRequest request;
  request.branch = "main";
  absl::StatusOr<Report> report =
      BuildReport(*store_, request, absl::FromUnixSeconds(1800000000));
  ASSERT_TRUE(report.ok()) << report.status();
  const Report& r = *report;

  ASSERT_EQ(r.headline.size(), 1);
  EXPECT_EQ(r.headline[0].metric, "kda.fused");
  EXPECT_EQ(r.headline[0].merges, 3);
  EXPECT_NEAR(r.headline[0].cumulative, 1.5 * 2.0 * 1.1, 1e-9);
  EXPECT_NEAR(r.headline[0].low, 3.3 * 0.95 * 0.95 * 0.95, 1e-9);
  ASSERT_EQ(r.timeline.at("kda.fused").size(), 3);
  EXPECT_NEAR(r.timeline.at("kda.fused")[1].cumulative, 3.0, 1e-9);

  EXPECT_EQ(r.candidates.size(), 10);
  ASSERT_EQ(r.rejected.at("gaming").size(), 1);
  ASSERT_EQ(r.rejected.at("precision_failed").size(), 1);
  EXPECT_EQ(r.rejected.size(), 2);

  // No samples were recorded, so there is no history to split.
  EXPECT_TRUE(r.change_points.empty());

  ASSERT_EQ(r.nodes.size(), 1);
  EXPECT_EQ(r.nodes[0].name, "node-a");

  ASSERT_EQ(r.precision.size(), 1);
  EXPECT_EQ(r.precision[0].evaluation, drop);
  ASSERT_EQ(r.precision[0].candidate.size(), 4);
  EXPECT_EQ(r.precision[0].candidate[3].first, 65536);

  // report.json: the keys scripts read (tools/check_report.sh, the demo's
  // scenario check), optionals absent or null as model.h says.
  const nlohmann::json j = ReportToJson(r);
  for (const char* key : {"generated_at", "repo", "branch", "since", "headline", "timeline",
                          "candidates", "rejected", "precision", "bisections", "change_points",
                          "nodes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_TRUE(j["since"].is_null());
  EXPECT_EQ(j["headline"][0]["merges"], 3);
  EXPECT_NEAR(j["timeline"]["kda.fused"][1]["cumulative"].get<double>(), 3.0, 1e-9);
  EXPECT_EQ(j["rejected"]["gaming"][0]["reason"]["code"], "gaming");
  EXPECT_EQ(j["candidates"].size(), 10);
  int merged = 0;
  for (const nlohmann::json& c : j["candidates"]) merged += c["merge"] == "merged";
  EXPECT_EQ(merged, 3);
  EXPECT_EQ(j["candidates"][0]["metric"]["name"], "kda.fused");
  EXPECT_EQ(j["precision"][0]["candidate"][3][0], 65536);
  EXPECT_TRUE(j["timeline"]["kda.fused"][0]["value"].is_number());

  const std::string md = RenderMarkdown(r);
  EXPECT_THAT(md, HasSubstr("| kda.fused | **3.30x** |"));
  EXPECT_THAT(md, HasSubstr("### gaming (1)"));
  EXPECT_THAT(md, HasSubstr("### precision_failed (1)"));
  EXPECT_THAT(md, HasSubstr("c2: GAMING"));
  EXPECT_THAT(md, HasSubstr("| node-a |"));
  EXPECT_THAT(md, HasSubstr("## Change points"));
  EXPECT_THAT(md, HasSubstr("| 65536 | 6.4e-05 | 0.00192 |"));

  // HTML: self-contained, one chart with the first version and the three
  // landings, the headline card, every section.
  const std::string html = RenderHtml(r);
  EXPECT_THAT(html, HasSubstr("<svg class=\"chart\""));
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("http://"), std::string::npos);
  EXPECT_EQ(html.find("https://"), std::string::npos);
  const size_t series = html.find("<polyline class=\"series\" points=\"");
  ASSERT_NE(series, std::string::npos);
  const std::string points = html.substr(series, html.find("\"/>", series) - series);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 4) << points;
  EXPECT_THAT(html, HasSubstr("3.30x"));
  EXPECT_THAT(html, HasSubstr("speedup vs first version (x)"));
  EXPECT_THAT(html, HasSubstr("<h3>gaming (1)</h3>"));
  EXPECT_THAT(html, HasSubstr("<td>node-a</td>"));
}

TEST_F(ReportTest, ChangePointsSplitTheSamplesOfTheBranchsSuccessiveTips) {
  // Eight pairs per evaluation around `base` and `cand` ns, +-1 ns.
  auto pairs = [](double base, double cand) {
    std::vector<std::pair<double, double>> out;
    for (int i = 0; i < 8; ++i) out.push_back({base + (i % 3) - 1, cand + (i % 2) - 0.5});
    return out;
  };
  // v0 at 100 ns. `fast` lands v1 at 50 ns; `slow` (70 ns) is rejected and
  // measured nothing of the branch but its tip.
  Evaluated fast{.id = "fast", .decision = v1::ACCEPT, .value = 50, .speedup = 2.0,
                 .baseline_sha = "v0", .candidate_sha = "v1", .merged_sha = "v1",
                 .pairs = pairs(100, 50)};
  // Accepted against v0 before v1 landed, so it is re-measured on v1 (a
  // scratch merge commit m3, no target branch) and lands m3: as fast as v1.
  Evaluated late{.id = "late", .decision = v1::ACCEPT, .value = 99, .speedup = 1.01,
                 .baseline_sha = "v0", .candidate_sha = "c3", .merged_sha = "m3",
                 .pairs = pairs(100, 99)};
  Evaluated remeasure{.id = "late-on-v1", .decision = v1::ACCEPT, .value = 50, .speedup = 1.0,
                      .target_branch = "", .baseline_sha = "v1", .candidate_sha = "m3",
                      .pairs = pairs(50, 50)};
  Evaluated slow{.id = "slow", .decision = v1::REJECT, .value = 70, .speedup = 0.71,
                 .code = v1::REGRESSION, .baseline_sha = "m3", .pairs = pairs(50, 70)};
  const std::string fast_id = Finish(fast);
  Finish(late);
  Finish(remeasure);
  Finish(slow);

  ReportRequest request;
  request.branch = "main";
  absl::StatusOr<Report> report = BuildReport(*store_, request, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::vector<ChangePointRow>& points = report->change_points;
  // v0: 16 baseline samples (fast, late); v1: fast's 8 candidate samples
  // and the re-measure's 8 baseline ones; m3: the re-measure's 8 candidate
  // samples and slow's 8 baseline ones. Slow's own 70s are not the
  // branch's.
  ASSERT_EQ(points.size(), 1) << ReportToJson(*report)["change_points"].dump();
  EXPECT_EQ(points[0].metric, "kda.fused");
  EXPECT_EQ(points[0].commit, "v1");
  EXPECT_EQ(points[0].evaluation, fast_id);
  EXPECT_TRUE(points[0].at_landing);
  EXPECT_EQ(points[0].index, 16);
  EXPECT_EQ(points[0].samples, 48);
  EXPECT_NEAR(points[0].mean_before, 100, 1);
  EXPECT_NEAR(points[0].mean_after, 50, 1);
  ASSERT_TRUE(points[0].nearest_landing.has_value());
  EXPECT_EQ(points[0].nearest_landing->commit, "v1");
  EXPECT_EQ(points[0].nearest_landing->offset, 0);
  EXPECT_THAT(RenderMarkdown(*report), HasSubstr("| kda.fused | v1 | at its landing | 16 of 48 |"));
}

// One fast outlier as the first version's last sample pulls the split a
// sample early; the report names the landing it is next to and how far.
TEST_F(ReportTest, AChangePointBesideALandingSaysHowFar) {
  std::vector<std::pair<double, double>> before, landing, after;
  for (int i = 0; i < 12; ++i) {
    before.push_back({100 + (i % 3) - 1, 99 + (i % 2)});
    landing.push_back({100 + (i % 3) - 1, 50 + (i % 2)});
    after.push_back({50 + (i % 3) - 1, 50 + (i % 2)});
  }
  // v0's samples are first's baselines, then fast's: its last one is fast.
  landing.back().first = 50;
  Evaluated fast{.id = "fast", .decision = v1::ACCEPT, .value = 50, .speedup = 2.0,
                 .baseline_sha = "v0", .candidate_sha = "v1", .merged_sha = "v1",
                 .pairs = landing};
  Evaluated next{.id = "next", .decision = v1::INCONCLUSIVE, .value = 50, .speedup = 1.0,
                 .baseline_sha = "v1", .candidate_sha = "c2", .pairs = after};
  Evaluated first{.id = "first", .decision = v1::INCONCLUSIVE, .value = 99, .speedup = 1.0,
                  .baseline_sha = "v0", .candidate_sha = "c1", .pairs = before};
  Finish(first);
  Finish(fast);
  Finish(next);
  ReportRequest request;
  request.branch = "main";
  absl::StatusOr<Report> report = BuildReport(*store_, request, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::vector<ChangePointRow>& points = report->change_points;
  ASSERT_EQ(points.size(), 1) << ReportToJson(*report)["change_points"].dump();
  EXPECT_FALSE(points[0].at_landing);
  ASSERT_TRUE(points[0].nearest_landing.has_value());
  EXPECT_EQ(points[0].nearest_landing->commit, "v1");
  EXPECT_EQ(points[0].nearest_landing->offset, -1);
  EXPECT_THAT(RenderMarkdown(*report), HasSubstr("| 1 sample before the landing of v1 |"));
}

// Runs headless Chromium on `page`: its console output (stderr) and the DOM
// after load. False when Chromium is not installed.
bool RunChromium(const std::string& page, const std::string& screenshot, std::string* console,
                 std::string* dom) {
  if (std::system("command -v chromium > /dev/null 2>&1") != 0) return false;
  const std::string tmp = TestTmpDir();
  const std::string flags =
      "--headless --no-sandbox --disable-gpu --enable-logging=stderr --v=0 "
      "--window-size=1200,2400 --user-data-dir=" + tmp + "/chromium-profile";
  EXPECT_EQ(std::system(absl::StrCat("chromium ", flags, " --screenshot=", screenshot, " file://",
                                     page, " 2> ", tmp, "/console.txt > /dev/null")
                            .c_str()),
            0);
  EXPECT_EQ(std::system(absl::StrCat("chromium ", flags, " --dump-dom file://", page, " > ", tmp,
                                     "/dom.html 2> /dev/null")
                            .c_str()),
            0);
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  *console = read(tmp + "/console.txt");
  *dom = read(tmp + "/dom.html");
  return true;
}

TEST_F(ReportTest, HtmlLoadsInHeadlessChromiumWithoutConsoleErrorsAndWithData) {
  Finish("c0", v1::ACCEPT, 100, 1.4, v1::VERIFIED, /*merge=*/true);
  Finish("c1", v1::REJECT, 100, 0.8, v1::PRECISION_FAILED);
  Finish("c2", v1::ACCEPT, 70, 1.3, v1::VERIFIED, /*merge=*/true);
  absl::StatusOr<Report> report = BuildReport(*store_, {}, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string tmp = TestTmpDir();
  const std::string page = tmp + "/report.html", shot = tmp + "/report.png";
  std::ofstream(page) << RenderHtml(*report);
  // The console check must be able to fail: a page that logs an error.
  const std::string control = tmp + "/control.html";
  std::ofstream(control) << "<!DOCTYPE html><html><body><script>console.error('control')"
                            "</script></body></html>";
  std::string console, dom;
  if (!RunChromium(control, tmp + "/control.png", &console, &dom)) {
    if (std::getenv("CI") != nullptr) FAIL() << "chromium is not installed (tools/bootstrap.sh --test)";
    GTEST_SKIP() << "chromium is not installed";
  }
  ASSERT_THAT(console, HasSubstr("CONSOLE")) << "the console check cannot see errors";

  ASSERT_TRUE(RunChromium(page, shot, &console, &dom));
  EXPECT_EQ(console.find("CONSOLE"), std::string::npos) << console;
  std::ifstream png(shot, std::ios::binary | std::ios::ate);
  ASSERT_TRUE(png.good()) << "no screenshot";
  EXPECT_GT(static_cast<int64_t>(png.tellg()), 20000) << "the screenshot looks blank";
  // The chart as the browser parsed it: the series through the first
  // version and both landings, the band, labelled axes.
  const size_t series = dom.find("class=\"series\" points=\"");
  ASSERT_NE(series, std::string::npos) << dom;
  const std::string points = dom.substr(series, dom.find('"', series + 24) - series);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 3) << points;
  EXPECT_THAT(dom, HasSubstr("class=\"band\""));
  EXPECT_THAT(dom, HasSubstr("speedup vs first version (x)"));
  EXPECT_THAT(dom, HasSubstr("1.82x"));  // 1.4 x 1.3, the headline card.
  // The precision chart: both curves over four lengths, the bound.
  const size_t baseline = dom.find("class=\"series-b\" points=\"");
  ASSERT_NE(baseline, std::string::npos);
  const std::string curve = dom.substr(baseline, dom.find('"', baseline + 26) - baseline);
  EXPECT_EQ(std::count(curve.begin(), curve.end(), ','), 4) << curve;
  EXPECT_THAT(dom, HasSubstr("context length (tokens, log scale)"));
  EXPECT_THAT(dom, HasSubstr("bound 0.002"));
}

TEST_F(ReportTest, BisectionsComeBackTogetherWithTheirCulprit) {
  // `densegate bisect` over 7 commits measured commits 3, 5, then 4.
  const std::string campaign = BisectCampaign("kda.fused", "good0123456789", "bad0123456789");
  Finish("b3", v1::ACCEPT, 100, 1.0, v1::VERIFIED, false, campaign, BisectHypothesis(3, 7));
  Finish("b5", v1::REJECT, 160, 0.6, v1::REGRESSION, false, campaign, BisectHypothesis(5, 7));
  Finish("b4", v1::REJECT, 160, 0.6, v1::REGRESSION, false, campaign, BisectHypothesis(4, 7));
  absl::StatusOr<Report> report = BuildReport(*store_, {}, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::vector<Bisection>& b = report->bisections;
  ASSERT_EQ(b.size(), 1);
  EXPECT_EQ(b[0].metric, "kda.fused");
  EXPECT_EQ(b[0].range, "good01234567..bad012345678");
  EXPECT_EQ(b[0].commits, 7);
  ASSERT_EQ(b[0].steps.size(), 3);
  EXPECT_EQ(b[0].steps[0].index, 3);
  EXPECT_EQ(b[0].steps[0].result, "clean");
  EXPECT_EQ(b[0].steps[1].result, "regressed");
  ASSERT_TRUE(b[0].culprit.has_value());
  EXPECT_EQ(b[0].culprit->commit, "b4-sha-01234");
  EXPECT_EQ(ReportToJson(*report)["bisections"][0]["culprit"]["commit"], "b4-sha-01234");
  EXPECT_THAT(RenderMarkdown(*report), HasSubstr("culprit b4-sha-01234"));
  EXPECT_THAT(RenderHtml(*report), HasSubstr("culprit <code>b4-sha-01234</code>"));
}

TEST_F(ReportTest, ABisectionStepIsJudgedByTheGateNotByItsInterval) {
  // Commit 3 measured 0.95x [0.903, 0.998], yet the gate accepted it (the
  // slowdown is bounded within its budget): clean, whatever the interval's
  // side of 1. Commit 5 ended inconclusive: undecided, so nothing past 3 is
  // known and there is no culprit.
  const std::string campaign = BisectCampaign("kda.fused", "good0123456789", "bad0123456789");
  Finish("b3", v1::ACCEPT, 105, 0.95, v1::VERIFIED, false, campaign, BisectHypothesis(3, 7));
  Finish("b5", v1::INCONCLUSIVE, 120, 0.9, v1::UNDECIDED, false, campaign, BisectHypothesis(5, 7));
  absl::StatusOr<Report> report = BuildReport(*store_, {}, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::vector<Bisection>& b = report->bisections;
  ASSERT_EQ(b.size(), 1);
  ASSERT_EQ(b[0].steps.size(), 2);
  ASSERT_TRUE(b[0].steps[0].measured.has_value());
  EXPECT_LT(b[0].steps[0].measured->ci_high, 1);
  EXPECT_EQ(b[0].steps[0].result, "clean");
  EXPECT_EQ(b[0].steps[1].result, "undecided");
  EXPECT_FALSE(b[0].culprit.has_value());
  EXPECT_TRUE(ReportToJson(*report)["bisections"][0]["culprit"].is_null());
  EXPECT_THAT(RenderMarkdown(*report), HasSubstr("| undecided |"));
}

TEST_F(ReportTest, CandidatesLinkToTheFeedbackTheirNodesUploaded) {
  Evaluated with;
  with.id = "with";
  with.decision = v1::ACCEPT;
  with.feedback_headline = "kda.fused: 1.200x \"><script>alert(1)</script>";
  const std::string linked = Finish(with);
  const std::string plain = Finish("plain", v1::ACCEPT, 50, 1.1);
  absl::StatusOr<Report> report = BuildReport(*store_, {}, absl::Now());
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string md = RenderMarkdown(*report);
  EXPECT_THAT(md, HasSubstr("| densegate feedback " + linked + " |"));
  // Offline, the page names the command, the headline as its title.
  std::string html = RenderHtml(*report);
  EXPECT_THAT(html, HasSubstr("<span title=\"kda.fused: 1.200x &quot;&gt;&lt;script&gt;alert(1)"
                              "&lt;/script&gt;\">densegate feedback " + linked + "</span>"));
  EXPECT_THAT(html, Not(HasSubstr("href=\"feedback")));
  // Served by the scheduler, it links to its feedback page.
  report->feedback_link_prefix = "feedback?token=t&evaluation=";
  html = RenderHtml(*report);
  EXPECT_THAT(html, HasSubstr("<a class=\"feedback\" href=\"feedback?token=t&amp;evaluation=" +
                              linked + "\""));
  EXPECT_THAT(html, Not(HasSubstr("evaluation=" + plain)));
  EXPECT_THAT(html, Not(HasSubstr("<script>")));
  const nlohmann::json j = ReportToJson(*report);
  for (const auto& row : j["candidates"]) {
    if (row["evaluation"] == linked) {
      EXPECT_EQ(row["feedback"]["headline"], "kda.fused: 1.200x \"><script>alert(1)</script>");
    } else {
      EXPECT_FALSE(row.contains("feedback"));
    }
  }
}

TEST_F(ReportTest, AnEmptyPeriodSaysSo) {
  absl::StatusOr<Report> report = BuildReport(*store_, {}, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string md = RenderMarkdown(*report);
  EXPECT_THAT(md, HasSubstr("No candidate landed in this period."));
  EXPECT_THAT(md, HasSubstr("No evaluation finished in this period."));
  EXPECT_THAT(md, HasSubstr("Nothing was rejected."));
}

// Each node says whether it gets this repository's gate work, and why not:
// quarantined by the scheduler's limit, or active yet noisier than the
// repository's own max_calibration_noise (0.03 in the verdicts here).
TEST_F(ReportTest, NodesSayWhetherAndWhyTheyGetThisRepositorysGateWork) {
  Finish("c1", v1::ACCEPT, 50, 1.2);
  auto calibrate = [&](const std::string& name, double noise, v1::NodeState state) {
    v1::NodeDimensions d;
    d.set_accelerator_kind("cpu");
    d.set_fingerprint("fp");
    absl::StatusOr<v1::Node> n = store_->RegisterNode(name, d);
    ASSERT_TRUE(n.ok()) << n.status();
    ASSERT_TRUE(store_->EnqueueCalibration(n->id(), 0).ok());
    ClaimRequest claim;
    claim.node_id = n->id();
    claim.dimensions = d;
    claim.lease_duration = absl::Minutes(1);
    absl::StatusOr<std::vector<v1::Lease>> leases = store_->ClaimJobs(claim);
    ASSERT_TRUE(leases.ok() && leases->size() == 1);
    ASSERT_TRUE(store_->FinishCalibration({(*leases)[0].id(), n->id()}, noise, state).ok());
  };
  calibrate("calm", 0.0016, v1::ACTIVE);
  calibrate("noisy", 0.0409, v1::ACTIVE);
  calibrate("noisier", 0.09, v1::QUARANTINED);
  ReportRequest request;
  request.repo = "/repos/workload";
  absl::StatusOr<Report> report =
      BuildReport(*store_, request, absl::FromUnixSeconds(1800000000));
  ASSERT_TRUE(report.ok()) << report.status();
  std::map<std::string, std::string> gate_work;
  for (const NodeRow& n : report->nodes) gate_work[n.name] = n.gate_work;
  EXPECT_EQ(gate_work["calm"], "yes");
  EXPECT_THAT(gate_work["noisy"],
              HasSubstr("none from this repository: quarantined for it, calibration noise "
                        "4.09% over its max_calibration_noise 3.00%"));
  EXPECT_THAT(gate_work["noisier"], HasSubstr("none: quarantined"));
  EXPECT_THAT(RenderMarkdown(*report), HasSubstr("| gate work |"));
}

}  // namespace
}  // namespace densegate::results
