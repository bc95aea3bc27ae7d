#include "results/report/report.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "results/store/store.h"

namespace densegate::results {
namespace {

using ::testing::HasSubstr;

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

  // One finished evaluation of `id` targeting main, whose verdict measured
  // kda.fused at `value` ns with `speedup`; landed when `merge`.
  std::string Finish(const std::string& id, v1::Decision decision, double value, double speedup,
                     v1::ReasonCode code = v1::REASON_CODE_UNSPECIFIED, bool merge = false) {
    SubmitParams p;
    p.candidate.set_id(id);
    p.candidate.set_repo("/repos/workload");
    p.candidate.set_target_branch("main");
    p.candidate.set_baseline_sha("base");
    p.candidate.set_candidate_sha(id + "-sha-0123456789");
    p.candidate.set_kind(v1::EXPERIMENT);
    p.candidate.set_submitter("agent:campaign-1");
    p.candidate.set_manifest_hash("m");
    absl::StatusOr<SubmitResult> submitted = store_->Submit(p);
    EXPECT_TRUE(submitted.ok()) << submitted.status();
    ClaimRequest claim;
    claim.node_id = "node-a";
    claim.dimensions.set_accelerator_kind("cpu");
    claim.lease_duration = absl::Minutes(1);
    absl::StatusOr<std::vector<v1::Lease>> leases = store_->ClaimJobs(claim);
    EXPECT_TRUE(leases.ok() && leases->size() == 1);
    v1::Verdict v;
    v.set_decision(decision);
    v.set_policy(v1::GAIN);
    v1::MetricComparison* m = v.add_metrics();
    m->set_metric("kda.fused");
    m->set_unit("ns");
    m->set_primary(true);
    m->set_baseline(value * speedup);
    m->set_candidate(value);
    m->set_speedup(speedup);
    m->set_ci_low(speedup * 0.95);
    m->set_ci_high(speedup * 1.05);
    m->set_n_pairs(12);
    if (code != v1::REASON_CODE_UNSPECIFIED) {
      v1::Reason* r = v.add_reasons();
      r->set_code(code);
      r->set_message(absl::StrCat(id, ": ", v1::ReasonCode_Name(code)));
    }
    EXPECT_TRUE(store_->FinishLease({(*leases)[0].id(), "node-a"}, v).ok());
    const std::string eval = submitted->evaluation.id();
    if (merge) {
      EXPECT_TRUE(store_->EnqueueMerge(eval, "test").ok());
      v1::MergeStatus s;
      s.set_state(v1::MERGED);
      s.set_merged_sha(id + "-merged-0123456789");
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
  absl::StatusOr<nlohmann::json> report =
      BuildReport(*store_, request, absl::FromUnixSeconds(1800000000));
  ASSERT_TRUE(report.ok()) << report.status();
  const nlohmann::json& r = *report;

  ASSERT_EQ(r["headline"].size(), 1);
  EXPECT_EQ(r["headline"][0]["metric"], "kda.fused");
  EXPECT_EQ(r["headline"][0]["merges"], 3);
  EXPECT_NEAR(r["headline"][0]["cumulative"].get<double>(), 1.5 * 2.0 * 1.1, 1e-9);
  EXPECT_NEAR(r["headline"][0]["low"].get<double>(), 3.3 * 0.95 * 0.95 * 0.95, 1e-9);
  ASSERT_EQ(r["timeline"]["kda.fused"].size(), 3);
  EXPECT_NEAR(r["timeline"]["kda.fused"][1]["cumulative"].get<double>(), 3.0, 1e-9);

  EXPECT_EQ(r["candidates"].size(), 10);
  ASSERT_EQ(r["rejected"]["gaming"].size(), 1);
  ASSERT_EQ(r["rejected"]["precision_failed"].size(), 1);
  EXPECT_EQ(r["rejected"].size(), 2);

  ASSERT_EQ(r["change_points"].size(), 1) << r["change_points"].dump();
  EXPECT_EQ(r["change_points"][0]["evaluation"], drop);
  EXPECT_GT(r["change_points"][0]["mean_before"].get<double>(), 95);
  EXPECT_LT(r["change_points"][0]["mean_after"].get<double>(), 55);

  ASSERT_EQ(r["nodes"].size(), 1);
  EXPECT_EQ(r["nodes"][0]["name"], "node-a");

  const std::string md = RenderMarkdown(r);
  EXPECT_THAT(md, HasSubstr("| kda.fused | **3.30x** |"));
  EXPECT_THAT(md, HasSubstr("### gaming (1)"));
  EXPECT_THAT(md, HasSubstr("### precision_failed (1)"));
  EXPECT_THAT(md, HasSubstr("c2: GAMING"));
  EXPECT_THAT(md, HasSubstr("| node-a |"));
  EXPECT_THAT(md, HasSubstr("## Change points"));
}

TEST_F(ReportTest, AnEmptyPeriodSaysSo) {
  absl::StatusOr<nlohmann::json> report = BuildReport(*store_, {}, absl::FromUnixSeconds(0));
  ASSERT_TRUE(report.ok()) << report.status();
  const std::string md = RenderMarkdown(*report);
  EXPECT_THAT(md, HasSubstr("No candidate landed in this period."));
  EXPECT_THAT(md, HasSubstr("No evaluation finished in this period."));
  EXPECT_THAT(md, HasSubstr("Nothing was rejected."));
}

}  // namespace
}  // namespace densegate::results
