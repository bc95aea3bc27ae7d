// The Store contract: every test runs against SQLite and PostgreSQL.
//
// PostgreSQL runs when DENSEGATE_PG_URL names a server (tools/pg_cluster.sh
// starts a throwaway one); each test gets its own fresh database. Without
// the URL those tests skip, or fail under CI=true.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/densegate.pb.h"
#include "results/store/clock.h"
#include "results/store/store.h"
#include "results/store/testing/postgres_for_test.h"
#include "results/store/testing/status_assertions.h"
#include "results/store/testing/test_database.h"

namespace densegate::results {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using ::testing::UnorderedElementsAreArray;

constexpr char kRepo[] = "https://git.example/densegate.git";

v1::Candidate MakeCandidate(absl::string_view id,
                            v1::CandidateKind kind = v1::CI,
                            absl::string_view repo = kRepo,
                            absl::string_view submitter = "ci") {
  v1::Candidate c;
  c.set_id(std::string(id));
  c.set_repo(std::string(repo));
  c.set_target_branch("main");
  c.set_baseline_ref("main");
  c.set_baseline_sha("b0b0b0");
  c.set_candidate_ref(absl::StrCat("refs/heads/", id));
  c.set_candidate_sha(absl::StrCat("c-", id));
  c.set_kind(kind);
  c.set_submitter(std::string(submitter));
  c.set_manifest_hash("m1");
  c.set_hypothesis("faster");
  return c;
}

v1::NodeDimensions Dims(absl::string_view kind = "cpu", int count = 0,
                        absl::string_view fingerprint = "fp-1") {
  v1::NodeDimensions d;
  d.set_accelerator_kind(std::string(kind));
  d.set_accelerator_count(count);
  d.set_accelerator_memory_bytes(int64_t{80} << 30);
  d.set_fingerprint(std::string(fingerprint));
  d.set_cpu_cores(16);
  (*d.mutable_labels())["rack"] = "r1";
  return d;
}

v1::Verdict MakeVerdict(v1::Decision decision) {
  v1::Verdict v;
  v.set_decision(decision);
  v.set_policy(v1::NO_REGRESSION);
  v1::Reason* r = v.add_reasons();
  r->set_code(decision == v1::ACCEPT ? v1::VERIFIED : v1::REGRESSION);
  r->set_message("kda_decode: speedup 1.74x [1.69, 1.80]");
  v1::MetricComparison* m = v.add_metrics();
  m->set_metric("kda_decode.fused_b32");
  m->set_unit("ns");
  m->set_direction(v1::LOWER_IS_BETTER);
  m->set_primary(true);
  m->set_baseline(100.5);
  m->set_candidate(57.75);
  m->set_speedup(1.74);
  m->set_ci_low(1.69);
  m->set_ci_high(1.80);
  m->set_n_pairs(20);
  m->set_p_value(1e-6);
  m->set_significant(true);
  m->set_bootstrap_low(1.68);  // not a column: kept in the stored message
  v1::Provenance* p = v.mutable_provenance();
  p->set_manifest_hash("m1");
  p->set_node_fingerprint("fp-1");
  p->set_software_version("densegate 0.1.0 abc123");
  p->set_statistics_seed(0xfedcba9876543210ULL);
  p->mutable_policy_parameters()->set_min_effect(0.02);
  p->mutable_policy_parameters()->set_confidence(0.95);
  return v;
}

v1::Sample MakeSample(absl::string_view metric, v1::Arm arm, int pair,
                      double value) {
  v1::Sample s;
  s.set_metric(std::string(metric));
  s.set_arm(arm);
  s.set_pair_index(pair);
  s.set_value(value);
  s.set_unit("ns");
  s.set_process_wall_seconds(0.25);
  s.set_process_cpu_seconds(0.2);
  return s;
}

LeaseRef Ref(const v1::Lease& lease, absl::string_view node) {
  return LeaseRef{lease.id(), std::string(node)};
}

int64_t Us(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}

class StoreContractTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgresql") {
      testing::CreatePostgresForThisTest(&db_);
      if (db_ == nullptr) return;
    } else {
      ASSERT_OK_AND_ASSIGN(
          db_,
          testing::TestDatabase::CreateSqlite(
              ::testing::UnitTest::GetInstance()->current_test_info()->name()));
    }
    ASSERT_OK_AND_ASSIGN(store_, Open());
    ASSERT_EQ(store_->backend(), GetParam());
  }

  void TearDown() override {
    store_.reset();
    db_.reset();
  }

  absl::StatusOr<std::unique_ptr<Store>> Open(StoreOptions options = {}) {
    options.clock = &clock_;
    return OpenStore(db_->url(), options);
  }

  v1::Evaluation SubmitOk(const v1::Candidate& c, int priority = 0,
                          int max_attempts = 0, JobRequirements req = {}) {
    SubmitParams p;
    p.candidate = c;
    p.priority = priority;
    p.max_attempts = max_attempts;
    p.requirements = std::move(req);
    absl::StatusOr<SubmitResult> r = store_->Submit(p);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_FALSE(r->deduplicated);
    return r->evaluation;
  }

  std::vector<v1::Lease> Claim(absl::string_view node, int n = 1,
                               v1::NodeDimensions dims = Dims(),
                               absl::Duration ttl = absl::Seconds(60)) {
    ClaimRequest req;
    req.node_id = std::string(node);
    req.dimensions = std::move(dims);
    req.max_jobs = n;
    req.lease_duration = ttl;
    absl::StatusOr<std::vector<v1::Lease>> r = store_->ClaimJobs(req);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<v1::Lease>{};
  }

  // A node "cpu-1" registered in `state`, candidates "first" and "second"
  // queued, and "first" leased to the node.
  struct TwoQueued {
    std::string node;
    std::string first_id;
    std::string second_id;
    v1::Lease first;
  };
  TwoQueued RegisterNodeAndClaimFirstOfTwo(v1::NodeState state) {
    TwoQueued out;
    absl::StatusOr<v1::Node> node = store_->RegisterNode("cpu-1", Dims());
    EXPECT_TRUE(node.ok()) << node.status();
    if (!node.ok()) return out;
    out.node = node->id();
    EXPECT_TRUE(store_->SetNodeState(out.node, state).ok());
    out.first_id = SubmitOk(MakeCandidate("first")).id();
    out.second_id = SubmitOk(MakeCandidate("second")).id();
    std::vector<v1::Lease> leases = Claim(out.node);
    EXPECT_THAT(leases, SizeIs(1));
    if (!leases.empty()) out.first = leases[0];
    return out;
  }

  // Submits one CI candidate and leases it to node "n1".
  v1::Lease SubmitAndClaim(absl::string_view id, int max_attempts = 0) {
    SubmitOk(MakeCandidate(id), 0, max_attempts);
    std::vector<v1::Lease> leases = Claim("n1");
    EXPECT_THAT(leases, SizeIs(1));
    return leases.empty() ? v1::Lease() : leases[0];
  }

  v1::EvaluationState StateOf(absl::string_view id) {
    absl::StatusOr<v1::Evaluation> e = store_->GetEvaluation(id);
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? e->state() : v1::EVALUATION_STATE_UNSPECIFIED;
  }

  int64_t Count(absl::string_view table) {
    absl::StatusOr<int64_t> n =
        db_->QueryInt(absl::StrCat("SELECT count(*) FROM ", table));
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : -1;
  }

  ManualClock clock_;
  std::unique_ptr<testing::TestDatabase> db_;
  std::unique_ptr<Store> store_;
};

// ---- Schema -------------------------------------------------------------

TEST_P(StoreContractTest, MigrationsAreVersionedAndIdempotent) {
  ASSERT_OK_AND_ASSIGN(int version, store_->SchemaVersion());
  EXPECT_GE(version, 1);
  ASSERT_OK(store_->Migrate());
  ASSERT_OK(store_->Migrate());
  ASSERT_OK_AND_ASSIGN(int again, store_->SchemaVersion());
  EXPECT_EQ(again, version);
  ASSERT_OK_AND_ASSIGN(int64_t rows,
                       db_->QueryInt("SELECT count(*) FROM schema_migrations"));
  EXPECT_EQ(rows, version);
  // A second store on the same database opens without migrating.
  StoreOptions no_migrate;
  no_migrate.migrate = false;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> other, Open(no_migrate));
  ASSERT_OK_AND_ASSIGN(int seen, other->SchemaVersion());
  EXPECT_EQ(seen, version);
}

TEST_P(StoreContractTest, DatabaseNewerThanBinaryIsRefused) {
  ASSERT_OK(db_->Exec(
      "INSERT INTO schema_migrations (version, name, applied_at_us) VALUES "
      "(999, 'from the future', 0)"));
  absl::Status s = store_->Migrate();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("999"));
  absl::StatusOr<std::unique_ptr<Store>> reopened = Open();
  EXPECT_EQ(reopened.status().code(), absl::StatusCode::kFailedPrecondition);
}

// ---- Submissions ----------------------------------------------------------

TEST_P(StoreContractTest, SubmitQueuesAnEvaluation) {
  clock_.Set(absl::FromUnixSeconds(1800000000));
  v1::Candidate c = MakeCandidate("cand-1", v1::EXPERIMENT);
  v1::Claim* claim = c.add_claims();
  claim->set_metric("kda_decode.fused_b32");
  claim->set_min_speedup(1.7);
  v1::Evaluation e = SubmitOk(c);
  EXPECT_THAT(e.id(), ::testing::StartsWith("ev-"));
  EXPECT_EQ(e.state(), v1::QUEUED);
  EXPECT_EQ(e.attempt(), 0);
  EXPECT_EQ(e.candidate().id(), "cand-1");
  EXPECT_EQ(e.candidate().policy(), v1::GAIN);  // the experiment default
  EXPECT_EQ(e.candidate().claims(0).min_speedup(), 1.7);
  EXPECT_EQ(e.candidate().submitted_at().seconds(), 1800000000);
  EXPECT_EQ(e.created_at().seconds(), 1800000000);
  EXPECT_EQ(e.merge().state(), v1::NOT_MERGING);
  EXPECT_FALSE(e.has_verdict());

  ASSERT_OK_AND_ASSIGN(v1::Evaluation got, store_->GetEvaluation(e.id()));
  EXPECT_EQ(got.SerializeAsString(), e.SerializeAsString());
  ASSERT_OK_AND_ASSIGN(v1::Evaluation found, store_->FindByCandidate("cand-1"));
  EXPECT_EQ(found.id(), e.id());

  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> audit, store_->ListAudit({}));
  ASSERT_THAT(audit, SizeIs(1));
  EXPECT_EQ(audit[0].actor, "ci");
  EXPECT_EQ(audit[0].action, "submit");
  EXPECT_EQ(audit[0].subject, e.id());

  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.queued, 1);
}

TEST_P(StoreContractTest, DuplicateSubmissionReturnsTheExistingEvaluation) {
  v1::Evaluation first = SubmitOk(MakeCandidate("same"));
  SubmitParams again;
  again.candidate = MakeCandidate("same");
  again.candidate.set_hypothesis("resubmitted");
  ASSERT_OK_AND_ASSIGN(SubmitResult r, store_->Submit(again));
  EXPECT_TRUE(r.deduplicated);
  EXPECT_EQ(r.evaluation.id(), first.id());
  EXPECT_EQ(r.evaluation.candidate().hypothesis(), "faster");
  EXPECT_EQ(Count("evaluations"), 1);
  EXPECT_EQ(Count("jobs"), 1);
  EXPECT_EQ(Count("candidates"), 1);
}

TEST_P(StoreContractTest, BadSubmissionsAreRejectedAndWriteNothing) {
  auto expect_invalid = [&](v1::Candidate c, int max_attempts = 0,
                            JobRequirements req = {}) {
    SubmitParams p;
    p.candidate = std::move(c);
    p.max_attempts = max_attempts;
    p.requirements = std::move(req);
    absl::StatusOr<SubmitResult> r = store_->Submit(p);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << r.status();
  };
  v1::Candidate c = MakeCandidate("x");
  c.clear_id();
  expect_invalid(c);
  c = MakeCandidate("x");
  c.clear_repo();
  expect_invalid(c);
  c = MakeCandidate("x");
  c.set_kind(v1::CANDIDATE_KIND_UNSPECIFIED);
  expect_invalid(c);
  c = MakeCandidate("x");
  c.clear_candidate_sha();
  expect_invalid(c);
  c = MakeCandidate("x");
  c.clear_submitter();
  expect_invalid(c);
  expect_invalid(MakeCandidate("x"), -1);
  JobRequirements bad;
  bad.min_accelerator_count = -2;
  expect_invalid(MakeCandidate("x"), 0, bad);

  EXPECT_EQ(Count("candidates"), 0);
  EXPECT_EQ(Count("evaluations"), 0);
  EXPECT_EQ(Count("repos"), 0);
  EXPECT_EQ(Count("audit_log"), 0);
  EXPECT_EQ(store_->FindByCandidate("x").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetEvaluation("ev-missing").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetEvaluation("").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, ListEvaluationsFiltersAndPages) {
  const absl::Time t0 = clock_.Now();
  std::vector<std::string> ids;
  for (int i = 0; i < 7; ++i) {
    clock_.Advance(absl::Minutes(1));
    v1::Candidate c = MakeCandidate(
        absl::StrCat("c", i), i % 2 == 0 ? v1::CI : v1::EXPERIMENT,
        i < 5 ? kRepo : "https://git.example/other.git",
        i % 3 == 0 ? "agent:a" : "ci");
    ids.push_back(SubmitOk(c).id());
  }
  // c0 runs: RUNNING.
  ASSERT_THAT(Claim("n1"), SizeIs(1));

  auto list = [&](v1::ListEvaluationsRequest req) {
    std::vector<std::string> out;
    absl::StatusOr<v1::ListEvaluationsResponse> r =
        store_->ListEvaluations(req);
    EXPECT_TRUE(r.ok()) << r.status();
    if (r.ok()) {
      for (const v1::Evaluation& e : r->evaluations()) out.push_back(e.id());
    }
    return out;
  };
  v1::ListEvaluationsRequest all;
  EXPECT_THAT(list(all), ElementsAre(ids[6], ids[5], ids[4], ids[3], ids[2],
                                     ids[1], ids[0]));
  v1::ListEvaluationsRequest by_state;
  by_state.add_states(v1::RUNNING);
  EXPECT_THAT(list(by_state), ElementsAre(ids[0]));
  v1::ListEvaluationsRequest by_kind;
  by_kind.set_kind(v1::EXPERIMENT);
  EXPECT_THAT(list(by_kind), ElementsAre(ids[5], ids[3], ids[1]));
  v1::ListEvaluationsRequest by_repo;
  by_repo.set_repo("https://git.example/other.git");
  EXPECT_THAT(list(by_repo), ElementsAre(ids[6], ids[5]));
  v1::ListEvaluationsRequest by_submitter;
  by_submitter.set_submitter("agent:a");
  EXPECT_THAT(list(by_submitter), ElementsAre(ids[6], ids[3], ids[0]));
  v1::ListEvaluationsRequest since;
  *since.mutable_since() = google::protobuf::Timestamp();
  since.mutable_since()->set_seconds(
      absl::ToUnixSeconds(t0 + absl::Minutes(5)));
  EXPECT_THAT(list(since), ElementsAre(ids[6], ids[5], ids[4]));
  v1::ListEvaluationsRequest combined;
  combined.set_kind(v1::CI);
  combined.add_states(v1::QUEUED);
  combined.set_repo(kRepo);
  EXPECT_THAT(list(combined), ElementsAre(ids[4], ids[2]));

  // Pages of 3, newest first, until the token runs out.
  std::vector<std::string> paged;
  v1::ListEvaluationsRequest page;
  page.set_page_size(3);
  int pages = 0;
  while (true) {
    ASSERT_OK_AND_ASSIGN(v1::ListEvaluationsResponse r,
                         store_->ListEvaluations(page));
    ++pages;
    EXPECT_LE(r.evaluations_size(), 3);
    for (const v1::Evaluation& e : r.evaluations()) paged.push_back(e.id());
    if (r.next_page_token().empty()) break;
    page.set_page_token(r.next_page_token());
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(paged, list(all));

  v1::ListEvaluationsRequest bad_token;
  bad_token.set_page_token("not-a-token");
  EXPECT_EQ(store_->ListEvaluations(bad_token).status().code(),
            absl::StatusCode::kInvalidArgument);
  v1::ListEvaluationsRequest bad_size;
  bad_size.set_page_size(-1);
  EXPECT_EQ(store_->ListEvaluations(bad_size).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Queue ------------------------------------------------------------------

TEST_P(StoreContractTest, ClaimsRemeasuresThenCiThenExperimentsByPriority) {
  const std::string e_low =
      SubmitOk(MakeCandidate("e-low", v1::EXPERIMENT), 0).id();
  const std::string e_high =
      SubmitOk(MakeCandidate("e-high", v1::EXPERIMENT), 9).id();
  const std::string ci_a = SubmitOk(MakeCandidate("ci-a", v1::CI), 0).id();
  const std::string ci_b = SubmitOk(MakeCandidate("ci-b", v1::CI), 0).id();
  const std::string ci_top = SubmitOk(MakeCandidate("ci-top", v1::CI), 5).id();
  const std::string e_mid =
      SubmitOk(MakeCandidate("e-mid", v1::EXPERIMENT), 9).id();
  // The merge queue's re-measure of an experiment, submitted last and at a
  // low priority: its branch waits for it, so it goes first.
  v1::Candidate remeasure = MakeCandidate("e-remeasure", v1::EXPERIMENT);
  remeasure.set_remeasure_of(e_low);
  const std::string e_remeasure = SubmitOk(remeasure, -5).id();

  std::vector<std::string> order;
  // A batch of 4, then the rest one at a time: the same order either way.
  for (const v1::Lease& l : Claim("n1", 4))
    order.push_back(l.evaluation().id());
  for (int i = 0; i < 4; ++i) {
    for (const v1::Lease& l : Claim("n1", 1))
      order.push_back(l.evaluation().id());
  }
  EXPECT_THAT(order, ElementsAre(e_remeasure, ci_top, ci_a, ci_b, e_high, e_mid,
                                 e_low));
  EXPECT_THAT(Claim("n1", 5), IsEmpty());
}

TEST_P(StoreContractTest, CountsQueuedJobsByClassPriorityAndAcceleratorKind) {
  JobRequirements gpu;
  gpu.accelerator_kind = "nvidia-h200";
  SubmitOk(MakeCandidate("ci-1", v1::CI), 0);
  SubmitOk(MakeCandidate("ci-2", v1::CI), 0);
  SubmitOk(MakeCandidate("ci-gpu", v1::CI), 0, 0, gpu);
  SubmitOk(MakeCandidate("e-9", v1::EXPERIMENT), 9);
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.queued, 4);
  ASSERT_THAT(counts.queued_by_group, SizeIs(3));
  auto group = [&](size_t i) {
    const QueueCounts::Group& g = counts.queued_by_group[i];
    return absl::StrCat(g.job_class, "/", g.priority, "/", g.accelerator_kind, "=", g.count);
  };
  EXPECT_EQ(group(0), "ci/0/=2");
  EXPECT_EQ(group(1), "ci/0/nvidia-h200=1");
  EXPECT_EQ(group(2), "experiment/9/=1");
}

TEST_P(StoreContractTest, ClaimMatchesNodeDimensions) {
  JobRequirements big;
  big.accelerator_kind = "nvidia-h200";
  big.min_accelerator_count = 4;
  const std::string gpu = SubmitOk(MakeCandidate("gpu"), 0, 0, big).id();
  JobRequirements pinned_fp;
  pinned_fp.fingerprint = "fp-special";
  const std::string fp = SubmitOk(MakeCandidate("fp"), 0, 0, pinned_fp).id();

  EXPECT_THAT(Claim("cpu-node", 5, Dims("cpu", 0)), IsEmpty());
  EXPECT_THAT(Claim("small-gpu", 5, Dims("nvidia-h200", 2)), IsEmpty());
  EXPECT_THAT(Claim("wrong-kind", 5, Dims("nvidia-a100", 8)), IsEmpty());
  std::vector<v1::Lease> got = Claim("big-gpu", 5, Dims("nvidia-h200", 8));
  ASSERT_THAT(got, SizeIs(1));
  EXPECT_EQ(got[0].evaluation().id(), gpu);
  got = Claim("special", 5, Dims("cpu", 0, "fp-special"));
  ASSERT_THAT(got, SizeIs(1));
  EXPECT_EQ(got[0].evaluation().id(), fp);
}

// A job with a noise limit (its repository's max_calibration_noise) goes
// only to a node whose last calibration is within it, by a claim or by the
// claim that follows a verdict; the store counts what waits for calmer nodes.
TEST_P(StoreContractTest, ANoiseLimitedJobGoesOnlyToANodeWithinTheLimit) {
  auto calibrated = [&](const std::string& name, double noise) {
    absl::StatusOr<v1::Node> n = store_->RegisterNode(name, Dims());
    EXPECT_TRUE(n.ok()) << n.status();
    EXPECT_OK(store_->EnqueueCalibration(n->id(), 0).status());
    std::vector<v1::Lease> c = Claim(n->id(), 1, Dims());
    EXPECT_THAT(c, SizeIs(1));
    EXPECT_OK(store_->FinishCalibration(Ref(c[0], n->id()), noise, v1::ACTIVE));
    return n->id();
  };
  const std::string noisy = calibrated("noisy", 0.0409);
  const std::string calm = calibrated("calm", 0.0016);
  JobRequirements strict;
  strict.max_node_noise = 0.03;
  const std::string limited = SubmitOk(MakeCandidate("limited"), 0, 0, strict).id();
  ASSERT_OK_AND_ASSIGN(int64_t waiting, store_->CountQueuedOverNoiseLimit(0.0409));
  EXPECT_EQ(waiting, 1);
  ASSERT_OK_AND_ASSIGN(int64_t none, store_->CountQueuedOverNoiseLimit(0.0016));
  EXPECT_EQ(none, 0);
  EXPECT_THAT(Claim(noisy, 5, Dims()), IsEmpty());

  // Work without a limit still reaches the noisy node; after its verdict the
  // limited job is not its next.
  const std::string open = SubmitOk(MakeCandidate("open")).id();
  std::vector<v1::Lease> got = Claim(noisy, 5, Dims());
  ASSERT_THAT(got, SizeIs(1));
  EXPECT_EQ(got[0].evaluation().id(), open);
  ASSERT_OK_AND_ASSIGN(NextClaim next,
                       store_->FinishLeaseAndClaimNext(Ref(got[0], noisy),
                                                       MakeVerdict(v1::ACCEPT), absl::Seconds(45)));
  EXPECT_FALSE(next.lease.has_value());

  got = Claim(calm, 5, Dims());
  ASSERT_THAT(got, SizeIs(1));
  EXPECT_EQ(got[0].evaluation().id(), limited);

  JobRequirements negative;
  negative.max_node_noise = -0.01;
  SubmitParams p;
  p.candidate = MakeCandidate("negative");
  p.requirements = negative;
  EXPECT_EQ(store_->Submit(p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, ClaimLeasesTheJob) {
  const std::string id = SubmitOk(MakeCandidate("c")).id();
  const absl::Time now = clock_.Now();
  std::vector<v1::Lease> leases = Claim("n1", 3, Dims(), absl::Seconds(30));
  ASSERT_THAT(leases, SizeIs(1));
  const v1::Lease& l = leases[0];
  EXPECT_FALSE(l.id().empty());
  EXPECT_EQ(l.job_kind(), v1::EVALUATION);
  EXPECT_EQ(Us(l.expires_at()), absl::ToUnixMicros(now + absl::Seconds(30)));
  EXPECT_EQ(l.evaluation().id(), id);
  EXPECT_EQ(l.evaluation().state(), v1::RUNNING);
  EXPECT_EQ(l.evaluation().node_id(), "n1");
  EXPECT_EQ(l.evaluation().attempt(), 1);
  EXPECT_EQ(l.evaluation().candidate().candidate_sha(), "c-c");

  ASSERT_OK_AND_ASSIGN(v1::Evaluation e, store_->GetEvaluation(id));
  EXPECT_EQ(e.state(), v1::RUNNING);
  EXPECT_EQ(e.node_id(), "n1");
  EXPECT_EQ(e.attempt(), 1);
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.queued, 0);
  EXPECT_EQ(counts.leased, 1);
}

TEST_P(StoreContractTest, ClaimRejectsBadRequests) {
  ClaimRequest r;
  r.node_id = "n1";
  r.max_jobs = 0;
  EXPECT_EQ(store_->ClaimJobs(r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.max_jobs = 1;
  r.lease_duration = absl::ZeroDuration();
  EXPECT_EQ(store_->ClaimJobs(r).status().code(),
            absl::StatusCode::kInvalidArgument);
  r.lease_duration = absl::Seconds(1);
  r.node_id.clear();
  EXPECT_EQ(store_->ClaimJobs(r).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreContractTest, HeartbeatExtendsTheLease) {
  v1::Lease l = SubmitAndClaim("c");
  clock_.Advance(absl::Seconds(50));
  ASSERT_OK_AND_ASSIGN(LeaseRenewal r,
                       store_->RenewLease(Ref(l, "n1"), absl::Seconds(60)));
  EXPECT_FALSE(r.cancel);
  EXPECT_EQ(r.expires_at, clock_.Now() + absl::Seconds(60));
  // Past the original expiry, but within the renewed one: nothing to reclaim.
  clock_.Advance(absl::Seconds(30));
  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> reclaimed,
                       store_->ReclaimExpiredLeases(100));
  EXPECT_THAT(reclaimed, IsEmpty());
  EXPECT_OK(store_->FinishLease(Ref(l, "n1"), MakeVerdict(v1::ACCEPT)));

  // Bad renewals.
  EXPECT_EQ(store_->RenewLease({"lease-nope", "n1"}, absl::Seconds(1))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      store_->RenewLease(Ref(l, "n1"), absl::ZeroDuration()).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->RenewLease(Ref(l, "n1"), absl::Seconds(1)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // already finished
}

TEST_P(StoreContractTest, ExpiredLeaseIsReclaimedAndRetriedElsewhere) {
  v1::Lease first = SubmitAndClaim("c", /*max_attempts=*/3);
  const std::string id = first.evaluation().id();
  clock_.Advance(absl::Seconds(61));
  // Expired but not yet reclaimed: the node can no longer write.
  absl::Status late =
      store_->FinishLease(Ref(first, "n1"), MakeVerdict(v1::ACCEPT));
  EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
  EXPECT_THAT(late.message(), HasSubstr("expired"));
  ASSERT_OK_AND_ASSIGN(LeaseRenewal renewal,
                       store_->RenewLease(Ref(first, "n1"), absl::Seconds(60)));
  EXPECT_TRUE(renewal.cancel);
  EXPECT_THAT(renewal.cancel_reason, HasSubstr("expired"));

  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> reclaimed,
                       store_->ReclaimExpiredLeases(100));
  ASSERT_THAT(reclaimed, SizeIs(1));
  EXPECT_EQ(reclaimed[0].lease_id, first.id());
  EXPECT_EQ(reclaimed[0].evaluation_id, id);
  EXPECT_EQ(reclaimed[0].node_id, "n1");
  EXPECT_EQ(reclaimed[0].attempts, 1);
  EXPECT_EQ(reclaimed[0].new_state, v1::QUEUED);
  EXPECT_EQ(StateOf(id), v1::QUEUED);
  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> none,
                       store_->ReclaimExpiredLeases(100));
  EXPECT_THAT(none, IsEmpty());

  std::vector<v1::Lease> second = Claim("n2");
  ASSERT_THAT(second, SizeIs(1));
  EXPECT_NE(second[0].id(), first.id());
  EXPECT_EQ(second[0].evaluation().attempt(), 2);
  EXPECT_EQ(second[0].evaluation().node_id(), "n2");

  // The reassigned lease's old holder is refused; nothing is written.
  absl::Status stale =
      store_->FinishLease(Ref(first, "n1"), MakeVerdict(v1::ACCEPT));
  EXPECT_EQ(stale.code(), absl::StatusCode::kFailedPrecondition) << stale;
  EXPECT_EQ(store_->GetVerdict(id).status().code(),
            absl::StatusCode::kNotFound);
  // The new holder finishes.
  EXPECT_OK(store_->FinishLease(Ref(second[0], "n2"), MakeVerdict(v1::REJECT)));
  ASSERT_OK_AND_ASSIGN(v1::Verdict v, store_->GetVerdict(id));
  EXPECT_EQ(v.decision(), v1::REJECT);
  EXPECT_EQ(v.provenance().node_id(), "n2");
}

TEST_P(StoreContractTest, DeadAfterMaxAttempts) {
  v1::Lease l = SubmitAndClaim("c", /*max_attempts=*/2);
  const std::string id = l.evaluation().id();
  clock_.Advance(absl::Seconds(61));
  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> r1,
                       store_->ReclaimExpiredLeases(10));
  ASSERT_THAT(r1, SizeIs(1));
  EXPECT_EQ(r1[0].new_state, v1::QUEUED);

  std::vector<v1::Lease> again = Claim("n1");
  ASSERT_THAT(again, SizeIs(1));
  EXPECT_EQ(again[0].evaluation().attempt(), 2);
  clock_.Advance(absl::Seconds(61));
  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> r2,
                       store_->ReclaimExpiredLeases(10));
  ASSERT_THAT(r2, SizeIs(1));
  EXPECT_EQ(r2[0].new_state, v1::DEAD);
  EXPECT_EQ(r2[0].attempts, 2);
  EXPECT_EQ(StateOf(id), v1::DEAD);
  EXPECT_THAT(Claim("n1"), IsEmpty());
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.dead, 1);
  EXPECT_EQ(counts.queued + counts.leased, 0);
}

TEST_P(StoreContractTest, InfrastructureFailureRequeuesThenKills) {
  v1::Lease l = SubmitAndClaim("c", /*max_attempts=*/2);
  const std::string id = l.evaluation().id();
  EXPECT_EQ(store_->FailLease(Ref(l, "n1"), "").status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_OK_AND_ASSIGN(v1::EvaluationState s1,
                       store_->FailLease(Ref(l, "n1"), "disk full"));
  EXPECT_EQ(s1, v1::QUEUED);
  EXPECT_EQ(StateOf(id), v1::QUEUED);
  // A failed lease cannot be used again.
  EXPECT_EQ(store_->FailLease(Ref(l, "n1"), "again").status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<v1::Lease> again = Claim("n2");
  ASSERT_THAT(again, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(v1::EvaluationState s2,
                       store_->FailLease(Ref(again[0], "n2"), "node lost GPU"));
  EXPECT_EQ(s2, v1::DEAD);
  EXPECT_EQ(StateOf(id), v1::DEAD);
}

TEST_P(StoreContractTest, VerdictIsWrittenExactlyOnce) {
  v1::Lease l = SubmitAndClaim("c");
  const std::string id = l.evaluation().id();
  clock_.Advance(absl::Seconds(5));
  v1::Verdict verdict = MakeVerdict(v1::ACCEPT);
  ASSERT_OK(store_->FinishLease(Ref(l, "n1"), verdict));

  ASSERT_OK_AND_ASSIGN(v1::Verdict got, store_->GetVerdict(id));
  EXPECT_EQ(got.evaluation_id(), id);
  EXPECT_EQ(got.candidate_id(), "c");
  EXPECT_EQ(got.decision(), v1::ACCEPT);
  EXPECT_EQ(got.provenance().statistics_seed(), 0xfedcba9876543210ULL);
  EXPECT_EQ(got.provenance().software_version(), "densegate 0.1.0 abc123");
  EXPECT_EQ(got.provenance().node_id(), "n1");
  EXPECT_EQ(got.provenance().policy_parameters().confidence(), 0.95);
  EXPECT_EQ(Us(got.decided_at()), absl::ToUnixMicros(clock_.Now()));
  EXPECT_EQ(got.metrics(0).speedup(), 1.74);

  ASSERT_OK_AND_ASSIGN(v1::Evaluation e, store_->GetEvaluation(id));
  EXPECT_EQ(e.state(), v1::FINISHED);
  EXPECT_EQ(e.verdict().SerializeAsString(), got.SerializeAsString());

  // Second finish: refused, and the stored verdict is unchanged.
  absl::Status again =
      store_->FinishLease(Ref(l, "n1"), MakeVerdict(v1::REJECT));
  EXPECT_EQ(again.code(), absl::StatusCode::kFailedPrecondition) << again;
  EXPECT_THAT(again.message(), HasSubstr("already finished"));
  ASSERT_OK_AND_ASSIGN(v1::Verdict still, store_->GetVerdict(id));
  EXPECT_EQ(still.decision(), v1::ACCEPT);
  EXPECT_EQ(Count("verdicts"), 1);
  EXPECT_EQ(Count("metric_comparisons"), 1);
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.done, 1);
}

TEST_P(StoreContractTest, FinishChecksTheHolderAndTheVerdict) {
  v1::Lease l = SubmitAndClaim("c");
  const std::string id = l.evaluation().id();
  EXPECT_EQ(
      store_->FinishLease({l.id(), "intruder"}, MakeVerdict(v1::ACCEPT)).code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      store_->FinishLease({"lease-404", "n1"}, MakeVerdict(v1::ACCEPT)).code(),
      absl::StatusCode::kNotFound);
  EXPECT_EQ(
      store_->FinishLease(Ref(l, "n1"), MakeVerdict(v1::DECISION_UNSPECIFIED))
          .code(),
      absl::StatusCode::kInvalidArgument);
  v1::Verdict wrong_eval = MakeVerdict(v1::ACCEPT);
  wrong_eval.set_evaluation_id("ev-other");
  EXPECT_EQ(store_->FinishLease(Ref(l, "n1"), wrong_eval).code(),
            absl::StatusCode::kInvalidArgument);
  v1::Verdict dup_metric = MakeVerdict(v1::ACCEPT);
  *dup_metric.add_metrics() = dup_metric.metrics(0);
  EXPECT_EQ(store_->FinishLease(Ref(l, "n1"), dup_metric).code(),
            absl::StatusCode::kInvalidArgument);

  // Samples of another evaluation cannot be cited.
  SubmitOk(MakeCandidate("other"));
  std::vector<v1::Lease> other = Claim("n2");
  ASSERT_THAT(other, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(
      std::vector<int64_t> other_ids,
      store_->AppendSamples(Ref(other[0], "n2"),
                            {MakeSample("m", v1::BASELINE, 0, 1.0)}));
  v1::Verdict foreign = MakeVerdict(v1::ACCEPT);
  foreign.mutable_provenance()->add_sample_ids(other_ids[0]);
  absl::Status s = store_->FinishLease(Ref(l, "n1"), foreign);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), HasSubstr("sample_ids"));

  EXPECT_EQ(Count("verdicts"), 0);
  EXPECT_EQ(Count("metric_comparisons"), 0);
  EXPECT_EQ(StateOf(id), v1::RUNNING);
  // The lease is still good.
  EXPECT_OK(store_->FinishLease(Ref(l, "n1"), MakeVerdict(v1::INCONCLUSIVE)));
}

TEST_P(StoreContractTest, CancellationStopsQueuedAndRunningWork) {
  const std::string running_id = SubmitOk(MakeCandidate("first")).id();
  const std::string queued_id = SubmitOk(MakeCandidate("second")).id();
  std::vector<v1::Lease> leases = Claim("n1");
  ASSERT_THAT(leases, SizeIs(1));
  ASSERT_EQ(leases[0].evaluation().id(), running_id);  // FIFO
  const v1::Lease running = leases[0];

  ASSERT_OK_AND_ASSIGN(
      v1::Evaluation c1,
      store_->CancelEvaluation(queued_id, "admin:ana", "wrong branch"));
  EXPECT_EQ(c1.state(), v1::CANCELLED);
  EXPECT_THAT(Claim("n9", 5), IsEmpty());

  ASSERT_OK_AND_ASSIGN(v1::Evaluation c2, store_->CancelEvaluation(
                                              running_id, "ci", "superseded"));
  EXPECT_EQ(c2.state(), v1::CANCELLED);
  ASSERT_OK_AND_ASSIGN(LeaseRenewal hb, store_->RenewLease(Ref(running, "n1"),
                                                           absl::Seconds(60)));
  EXPECT_TRUE(hb.cancel);
  EXPECT_THAT(hb.cancel_reason, HasSubstr("superseded"));
  absl::Status fin =
      store_->FinishLease(Ref(running, "n1"), MakeVerdict(v1::ACCEPT));
  EXPECT_EQ(fin.code(), absl::StatusCode::kFailedPrecondition) << fin;
  EXPECT_THAT(fin.message(), HasSubstr("cancelled"));
  EXPECT_EQ(store_
                ->AppendSamples(Ref(running, "n1"),
                                {MakeSample("m", v1::BASELINE, 0, 1)})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);

  EXPECT_EQ(store_->CancelEvaluation(running_id, "ci", "again").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->CancelEvaluation("ev-nope", "ci", "").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->CancelEvaluation(running_id, "", "").status().code(),
            absl::StatusCode::kInvalidArgument);
  // Nothing to reclaim: the cancelled lease is not live.
  clock_.Advance(absl::Hours(1));
  ASSERT_OK_AND_ASSIGN(std::vector<ReclaimedLease> r,
                       store_->ReclaimExpiredLeases(10));
  EXPECT_THAT(r, IsEmpty());

  AuditFilter f;
  f.actor = "admin:ana";
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> audit, store_->ListAudit(f));
  ASSERT_THAT(audit, SizeIs(1));
  EXPECT_EQ(audit[0].action, "cancel");
  EXPECT_EQ(audit[0].subject, queued_id);
  EXPECT_EQ(audit[0].detail, "wrong branch");
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.cancelled, 2);
}

TEST_P(StoreContractTest, FinishLeaseAndClaimNextLeasesTheNodesNextJob) {
  ASSERT_OK_AND_ASSIGN(v1::Node node,
                       store_->RegisterNode("gpu-1", Dims("nvidia-h200", 8)));
  ASSERT_OK(store_->SetNodeState(node.id(), v1::ACTIVE));
  const std::string first_id = SubmitOk(MakeCandidate("first")).id();
  // Needs more accelerators than the node has: never its next job.
  JobRequirements big;
  big.accelerator_kind = "nvidia-h200";
  big.min_accelerator_count = 16;
  const std::string big_id =
      SubmitOk(MakeCandidate("big"), /*priority=*/5, 0, big).id();
  const std::string second_id = SubmitOk(MakeCandidate("second")).id();
  std::vector<v1::Lease> first = Claim(node.id(), 1, Dims("nvidia-h200", 8));
  ASSERT_THAT(first, SizeIs(1));
  ASSERT_EQ(first[0].evaluation().id(), first_id);

  clock_.Advance(absl::Seconds(3));
  ASSERT_OK_AND_ASSIGN(NextClaim next,
                       store_->FinishLeaseAndClaimNext(Ref(first[0], node.id()),
                                                       MakeVerdict(v1::ACCEPT),
                                                       absl::Seconds(45)));
  // The verdict is written as FinishLease writes it.
  ASSERT_OK_AND_ASSIGN(v1::Verdict v, store_->GetVerdict(first_id));
  EXPECT_EQ(v.decision(), v1::ACCEPT);
  EXPECT_EQ(v.provenance().node_id(), node.id());
  EXPECT_EQ(StateOf(first_id), v1::FINISHED);
  // The next lease: the second submission, leased to this node as ClaimJobs
  // would lease it.
  EXPECT_EQ(next.node_state, v1::ACTIVE);
  ASSERT_TRUE(next.lease.has_value());
  EXPECT_EQ(next.lease->job_kind(), v1::EVALUATION);
  EXPECT_EQ(next.lease->evaluation().id(), second_id);
  EXPECT_EQ(next.lease->evaluation().candidate().id(), "second");
  EXPECT_EQ(next.lease->evaluation().state(), v1::RUNNING);
  EXPECT_EQ(next.lease->evaluation().node_id(), node.id());
  EXPECT_EQ(next.lease->evaluation().attempt(), 1);
  EXPECT_EQ(Us(next.lease->expires_at()),
            absl::ToUnixMicros(clock_.Now() + absl::Seconds(45)));
  ASSERT_OK_AND_ASSIGN(v1::Evaluation running,
                       store_->GetEvaluation(second_id));
  EXPECT_EQ(running.state(), v1::RUNNING);
  EXPECT_EQ(running.node_id(), node.id());
  ASSERT_OK_AND_ASSIGN(v1::Node busy, store_->GetNode(node.id()));
  EXPECT_EQ(busy.current_lease_id(), next.lease->id());
  ASSERT_OK_AND_ASSIGN(
      LeaseRenewal renewal,
      store_->RenewLease(Ref(*next.lease, node.id()), absl::Seconds(60)));
  EXPECT_FALSE(renewal.cancel);
  EXPECT_EQ(StateOf(big_id), v1::QUEUED);

  // Nothing left that the node matches: the verdict alone.
  ASSERT_OK_AND_ASSIGN(NextClaim last,
                       store_->FinishLeaseAndClaimNext(
                           Ref(*next.lease, node.id()), MakeVerdict(v1::REJECT),
                           absl::Seconds(45)));
  EXPECT_EQ(last.node_state, v1::ACTIVE);
  EXPECT_FALSE(last.lease.has_value());
  EXPECT_EQ(StateOf(second_id), v1::FINISHED);
  EXPECT_EQ(StateOf(big_id), v1::QUEUED);
  // Two calls one after the other: on PostgreSQL a statement each, with one
  // lease each; SQLite has no statements to share and counts none.
  const FinishBatchCounts counts = store_->finish_batch_counts();
  const int64_t expected = GetParam() == "postgresql" ? 2 : 0;
  EXPECT_EQ(counts.statements, expected);
  EXPECT_EQ(counts.leases, expected);
}

TEST_P(StoreContractTest,
       FinishLeaseAndClaimNextClaimsNothingForANodeNotActive) {
  const TwoQueued q = RegisterNodeAndClaimFirstOfTwo(v1::QUARANTINED);
  ASSERT_OK_AND_ASSIGN(NextClaim next,
                       store_->FinishLeaseAndClaimNext(Ref(q.first, q.node),
                                                       MakeVerdict(v1::REJECT),
                                                       absl::Seconds(60)));
  EXPECT_EQ(next.node_state, v1::QUARANTINED);
  EXPECT_FALSE(next.lease.has_value());
  EXPECT_EQ(StateOf(q.first_id), v1::FINISHED);
  EXPECT_EQ(StateOf(q.second_id), v1::QUEUED);
}

TEST_P(StoreContractTest,
       FinishLeaseAndClaimNextFailsAsFinishLeaseAndClaimsNothing) {
  const TwoQueued q = RegisterNodeAndClaimFirstOfTwo(v1::ACTIVE);

  // Another node's lease.
  absl::StatusOr<NextClaim> intruder = store_->FinishLeaseAndClaimNext(
      {q.first.id(), "intruder"}, MakeVerdict(v1::ACCEPT), absl::Seconds(60));
  EXPECT_EQ(intruder.status().code(), absl::StatusCode::kFailedPrecondition)
      << intruder.status();
  auto refusal = [&](const v1::Verdict& verdict, absl::Duration ttl) {
    return store_->FinishLeaseAndClaimNext(Ref(q.first, q.node), verdict, ttl)
        .status()
        .code();
  };
  // A verdict naming another evaluation.
  v1::Verdict wrong = MakeVerdict(v1::ACCEPT);
  wrong.set_evaluation_id(q.second_id);
  EXPECT_EQ(refusal(wrong, absl::Seconds(60)),
            absl::StatusCode::kInvalidArgument);
  // Bad arguments.
  EXPECT_EQ(refusal(MakeVerdict(v1::DECISION_UNSPECIFIED), absl::Seconds(60)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refusal(MakeVerdict(v1::ACCEPT), absl::ZeroDuration()),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StateOf(q.first_id), v1::RUNNING);
  EXPECT_EQ(StateOf(q.second_id), v1::QUEUED);
  EXPECT_EQ(store_->GetVerdict(q.first_id).status().code(),
            absl::StatusCode::kNotFound);

  // An expired lease: refused, and its job is not run twice.
  clock_.Advance(absl::Seconds(61));
  absl::StatusOr<NextClaim> late = store_->FinishLeaseAndClaimNext(
      Ref(q.first, q.node), MakeVerdict(v1::ACCEPT), absl::Seconds(60));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition)
      << late.status();
  EXPECT_THAT(late.status().message(), HasSubstr("expired"));
  EXPECT_EQ(StateOf(q.second_id), v1::QUEUED);
}

TEST_P(StoreContractTest, CalibrationJobsArePinnedToTheirNode) {
  ASSERT_OK_AND_ASSIGN(v1::Node node,
                       store_->RegisterNode("gpu-1", Dims("nvidia-h200", 8)));
  ASSERT_OK_AND_ASSIGN(v1::Node other,
                       store_->RegisterNode("gpu-2", Dims("nvidia-h200", 8)));
  SubmitOk(MakeCandidate("ci-work"));
  ASSERT_OK_AND_ASSIGN(int64_t job, store_->EnqueueCalibration(node.id(), 0));
  EXPECT_GT(job, 0);
  EXPECT_EQ(store_->EnqueueCalibration(node.id(), 0).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store_->EnqueueCalibration("node-unknown", 0).status().code(),
            absl::StatusCode::kNotFound);

  // The other node gets the CI work, never the pinned calibration.
  std::vector<v1::Lease> o = Claim(other.id(), 5, Dims("nvidia-h200", 8));
  ASSERT_THAT(o, SizeIs(1));
  EXPECT_EQ(o[0].job_kind(), v1::EVALUATION);

  std::vector<v1::Lease> mine = Claim(node.id(), 5, Dims("nvidia-h200", 8));
  ASSERT_THAT(mine, SizeIs(1));
  EXPECT_EQ(mine[0].job_kind(), v1::CALIBRATION);
  EXPECT_FALSE(mine[0].has_evaluation());
  ASSERT_OK_AND_ASSIGN(v1::Node busy, store_->GetNode(node.id()));
  EXPECT_EQ(busy.current_lease_id(), mine[0].id());

  EXPECT_EQ(
      store_->FinishLease(Ref(mine[0], node.id()), MakeVerdict(v1::ACCEPT))
          .code(),
      absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      store_->FinishCalibration(Ref(mine[0], node.id()), -1, v1::ACTIVE).code(),
      absl::StatusCode::kInvalidArgument);
  ASSERT_OK(
      store_->FinishCalibration(Ref(mine[0], node.id()), 0.012, v1::ACTIVE));
  ASSERT_OK_AND_ASSIGN(v1::Node calibrated, store_->GetNode(node.id()));
  EXPECT_EQ(calibrated.state(), v1::ACTIVE);
  EXPECT_DOUBLE_EQ(calibrated.calibration_noise(), 0.012);
  EXPECT_EQ(calibrated.current_lease_id(), "");
  // Finished: a new calibration may be queued.
  EXPECT_OK(store_->EnqueueCalibration(node.id(), 0).status());
}

// Every job is claimed exactly once by 8 threads, each with its own store
// (its own connection), then all are finished.
TEST_P(StoreContractTest, ConcurrentClaimsFromEightThreadsTakeEachJobOnce) {
  constexpr int kJobs = 240;
  constexpr int kThreads = 8;
  std::set<std::string> submitted;
  for (int i = 0; i < kJobs; ++i) {
    submitted.insert(
        SubmitOk(MakeCandidate(absl::StrCat("job-", i),
                               i % 3 == 0 ? v1::EXPERIMENT : v1::CI),
                 i % 5)
            .id());
  }
  std::vector<std::unique_ptr<Store>> stores;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> s, Open());
    stores.push_back(std::move(s));
  }
  std::mutex mu;
  std::vector<std::string> claimed;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store& s = *stores[t];
      const std::string node = absl::StrCat("node-", t);
      while (true) {
        ClaimRequest req;
        req.node_id = node;
        req.dimensions = Dims();
        req.max_jobs = 1 + t % 3;
        absl::StatusOr<std::vector<v1::Lease>> got = s.ClaimJobs(req);
        if (!got.ok()) {
          ++errors;
          ADD_FAILURE() << got.status();
          return;
        }
        if (got->empty()) return;
        for (const v1::Lease& l : *got) {
          absl::Status fin =
              s.FinishLease({l.id(), node}, MakeVerdict(v1::ACCEPT));
          if (!fin.ok()) {
            ++errors;
            ADD_FAILURE() << fin;
          }
          std::lock_guard<std::mutex> lock(mu);
          claimed.push_back(l.evaluation().id());
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_THAT(claimed, SizeIs(kJobs));
  EXPECT_THAT(claimed,
              UnorderedElementsAreArray(submitted.begin(), submitted.end()));
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.done, kJobs);
  EXPECT_EQ(Count("verdicts"), kJobs);
  EXPECT_EQ(Count("leases"), kJobs);
}

// Eight registered nodes, each finishing lease after lease with the next
// claim in the same call, as the scheduler's nodes do: every job runs once
// and every call succeeds. (The deadlock kPgClaimAfterFinish's ordering
// prevents needs a scheduler's timing: dispatch_bench met it, this loop
// does not.)
TEST_P(StoreContractTest, ConcurrentFinishAndClaimNextRunsEachJobOnce) {
  constexpr int kJobs = 320;
  constexpr int kThreads = 8;
  std::set<std::string> submitted;
  for (int i = 0; i < kJobs; ++i) {
    submitted.insert(SubmitOk(MakeCandidate(absl::StrCat("job-", i))).id());
  }
  std::vector<std::unique_ptr<Store>> stores;
  std::vector<std::string> nodes;
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> s, Open());
    stores.push_back(std::move(s));
    ASSERT_OK_AND_ASSIGN(
        v1::Node n, store_->RegisterNode(absl::StrCat("node-", t), Dims()));
    ASSERT_OK(store_->SetNodeState(n.id(), v1::ACTIVE));
    nodes.push_back(n.id());
  }
  std::mutex mu;
  std::vector<std::string> finished;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      Store& s = *stores[t];
      ClaimRequest req;
      req.node_id = nodes[t];
      req.dimensions = Dims();
      absl::StatusOr<std::vector<v1::Lease>> got = s.ClaimJobs(req);
      if (!got.ok()) {
        ADD_FAILURE() << got.status();
        return;
      }
      std::optional<v1::Lease> lease;
      if (!got->empty()) lease = got->front();
      while (lease.has_value()) {
        absl::StatusOr<NextClaim> next = s.FinishLeaseAndClaimNext(
            {lease->id(), nodes[t]}, MakeVerdict(v1::REJECT),
            absl::Seconds(60));
        if (!next.ok()) {
          ADD_FAILURE() << next.status();
          return;
        }
        {
          std::lock_guard<std::mutex> lock(mu);
          finished.push_back(lease->evaluation().id());
        }
        lease = std::move(next->lease);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_THAT(finished,
              UnorderedElementsAreArray(submitted.begin(), submitted.end()));
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store_->CountJobs());
  EXPECT_EQ(counts.done, kJobs);
  EXPECT_EQ(Count("verdicts"), kJobs);
  EXPECT_EQ(Count("leases"), kJobs);
}

// The same through one shared store: the store itself is thread-safe.
TEST_P(StoreContractTest, ConcurrentClaimsThroughOneSharedStore) {
  constexpr int kJobs = 120;
  for (int i = 0; i < kJobs; ++i) SubmitOk(MakeCandidate(absl::StrCat("j", i)));
  std::mutex mu;
  std::multiset<std::string> claimed;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      while (true) {
        ClaimRequest req;
        req.node_id = absl::StrCat("n", t);
        req.dimensions = Dims();
        req.max_jobs = 2;
        absl::StatusOr<std::vector<v1::Lease>> got = store_->ClaimJobs(req);
        if (!got.ok()) {
          ADD_FAILURE() << got.status();
          return;
        }
        if (got->empty()) return;
        std::lock_guard<std::mutex> lock(mu);
        for (const v1::Lease& l : *got) claimed.insert(l.evaluation().id());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(claimed.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(std::set<std::string>(claimed.begin(), claimed.end()).size(),
            static_cast<size_t>(kJobs));
}

// ---- Stages and samples ---------------------------------------------------

TEST_P(StoreContractTest, StagesAreAppendedAndTheLatestPerKindShown) {
  v1::Lease l = SubmitAndClaim("c");
  const std::string id = l.evaluation().id();
  v1::Stage build;
  build.set_kind(v1::BUILD);
  build.set_status(v1::STAGE_RUNNING);
  build.set_log_uri("bundle/build.log");
  ASSERT_OK(store_->RecordStage(Ref(l, "n1"), build));
  build.set_status(v1::STAGE_PASSED);
  build.set_seconds(42.5);
  build.set_summary("both arms built");
  ASSERT_OK(store_->RecordStage(Ref(l, "n1"), build));
  v1::Stage correctness;
  correctness.set_kind(v1::CORRECTNESS);
  correctness.set_status(v1::STAGE_FAILED);
  v1::TestCaseResult* t = correctness.add_tests();
  t->set_name("kda_decode_matches_reference");
  t->set_passed(false);
  ASSERT_OK(store_->RecordStage(Ref(l, "n1"), correctness));

  ASSERT_OK_AND_ASSIGN(std::vector<StageRecord> records,
                       store_->ListStages(id));
  ASSERT_THAT(records, SizeIs(3));
  EXPECT_EQ(records[0].stage.status(), v1::STAGE_RUNNING);
  EXPECT_EQ(records[1].stage.summary(), "both arms built");
  EXPECT_EQ(records[2].stage.tests(0).name(), "kda_decode_matches_reference");
  EXPECT_EQ(records[2].lease_id, l.id());
  EXPECT_EQ(records[2].attempt, 1);
  EXPECT_LT(records[0].id, records[1].id);

  ASSERT_OK_AND_ASSIGN(v1::Evaluation e, store_->GetEvaluation(id));
  ASSERT_THAT(e.stages(), SizeIs(2));
  EXPECT_EQ(e.stages(0).kind(), v1::BUILD);
  EXPECT_EQ(e.stages(0).status(), v1::STAGE_PASSED);
  EXPECT_EQ(e.stages(1).kind(), v1::CORRECTNESS);

  v1::Stage bad;
  EXPECT_EQ(store_->RecordStage(Ref(l, "n1"), bad).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->ListStages("ev-nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->RecordStage({l.id(), "n2"}, build).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreContractTest, SamplesAreAppendOnlyAllOrNothing) {
  v1::Lease l = SubmitAndClaim("c");
  const std::string id = l.evaluation().id();
  std::vector<v1::Sample> batch;
  for (int pair = 0; pair < 3; ++pair) {
    batch.push_back(MakeSample("m", v1::BASELINE, pair, 100.0 + pair));
    batch.push_back(MakeSample("m", v1::CANDIDATE, pair, 60.0 + pair / 8.0));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> ids,
                       store_->AppendSamples(Ref(l, "n1"), batch));
  ASSERT_THAT(ids, SizeIs(6));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));

  // A batch with one duplicate writes none of its samples.
  std::vector<v1::Sample> dup = {MakeSample("m", v1::BASELINE, 3, 1.0),
                                 MakeSample("m", v1::CANDIDATE, 0, 2.0)};
  EXPECT_EQ(store_->AppendSamples(Ref(l, "n1"), dup).status().code(),
            absl::StatusCode::kAlreadyExists);
  // Bad samples.
  v1::Sample with_id = MakeSample("m", v1::BASELINE, 9, 1);
  with_id.set_id(77);
  v1::Sample nan = MakeSample("m", v1::BASELINE, 9, std::nan(""));
  v1::Sample no_arm = MakeSample("m", v1::ARM_UNSPECIFIED, 9, 1);
  v1::Sample negative = MakeSample("m", v1::BASELINE, -1, 1);
  v1::Sample foreign = MakeSample("m", v1::BASELINE, 9, 1);
  foreign.set_evaluation_id("ev-other");
  for (const v1::Sample& s : {with_id, nan, no_arm, negative, foreign}) {
    EXPECT_EQ(store_
                  ->AppendSamples(Ref(l, "n1"),
                                  {MakeSample("ok", v1::BASELINE, 0, 1), s})
                  .status()
                  .code(),
              absl::StatusCode::kInvalidArgument)
        << s.ShortDebugString();
  }
  EXPECT_EQ(store_->AppendSamples(Ref(l, "n1"), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Count("samples"), 6);

  ASSERT_OK_AND_ASSIGN(std::vector<v1::Sample> stored, store_->ListSamples(id));
  ASSERT_THAT(stored, SizeIs(6));
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(stored[i].id(), ids[i]);
    EXPECT_EQ(stored[i].evaluation_id(), id);
    EXPECT_EQ(stored[i].metric(), batch[i].metric());
    EXPECT_EQ(stored[i].arm(), batch[i].arm());
    EXPECT_EQ(stored[i].pair_index(), batch[i].pair_index());
    EXPECT_EQ(stored[i].value(), batch[i].value());  // bit-exact round trip
    EXPECT_EQ(stored[i].process_wall_seconds(), 0.25);
    EXPECT_EQ(Us(stored[i].recorded_at()), absl::ToUnixMicros(clock_.Now()));
  }
  EXPECT_EQ(store_->ListSamples("ev-nope").status().code(),
            absl::StatusCode::kNotFound);

  // The verdict records which samples it was computed from.
  v1::Verdict v = MakeVerdict(v1::ACCEPT);
  for (int64_t sid : ids) v.mutable_provenance()->add_sample_ids(sid);
  ASSERT_OK(store_->FinishLease(Ref(l, "n1"), v));
  EXPECT_EQ(Count("verdict_samples"), 6);
  ASSERT_OK_AND_ASSIGN(v1::Verdict got, store_->GetVerdict(id));
  EXPECT_THAT(got.provenance().sample_ids(),
              ElementsAre(ids[0], ids[1], ids[2], ids[3], ids[4], ids[5]));
  // After the lease ends, no more samples.
  EXPECT_EQ(
      store_->AppendSamples(Ref(l, "n1"), {MakeSample("m", v1::BASELINE, 7, 1)})
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_P(StoreContractTest, TheDatabaseRejectsChangesToImmutableRows) {
  v1::Lease l = SubmitAndClaim("c");
  ASSERT_OK(
      store_
          ->AppendSamples(Ref(l, "n1"), {MakeSample("m", v1::BASELINE, 0, 5.0)})
          .status());
  ASSERT_OK(store_->FinishLease(Ref(l, "n1"), MakeVerdict(v1::ACCEPT)));
  for (const char* sql :
       {"UPDATE samples SET value = 1", "DELETE FROM samples",
        "UPDATE verdicts SET decision = 2", "DELETE FROM verdicts",
        "DELETE FROM metric_comparisons", "UPDATE audit_log SET actor = 'x'",
        "DELETE FROM audit_log"}) {
    absl::Status s = db_->Exec(sql);
    EXPECT_FALSE(s.ok()) << sql;
    EXPECT_THAT(s.message(), HasSubstr("immutable")) << sql;
  }
  if (db_->is_postgres()) {
    absl::Status s = db_->Exec("TRUNCATE samples CASCADE");
    EXPECT_THAT(s.message(), HasSubstr("immutable"));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Sample> stored,
                       store_->ListSamples(l.evaluation().id()));
  ASSERT_THAT(stored, SizeIs(1));
  EXPECT_EQ(stored[0].value(), 5.0);
  EXPECT_EQ(Count("verdicts"), 1);
}

TEST_P(StoreContractTest, MetricComparisonsFormAHistory) {
  for (int i = 0; i < 3; ++i) {
    clock_.Advance(absl::Hours(1));
    v1::Lease l = SubmitAndClaim(absl::StrCat("c", i));
    v1::Verdict v = MakeVerdict(v1::ACCEPT);
    v.mutable_metrics(0)->set_speedup(1.0 + i / 10.0);
    v1::MetricComparison* other = v.add_metrics();
    other->set_metric("serve \"ttft\", p99\\tail {x}");  // needs quoting
    other->set_speedup(0.99);
    ASSERT_OK(store_->FinishLease(Ref(l, "n1"), v));
  }
  MetricHistoryFilter f;
  f.metric = "kda_decode.fused_b32";
  ASSERT_OK_AND_ASSIGN(std::vector<MetricComparisonRecord> h,
                       store_->ListMetricComparisons(f));
  ASSERT_THAT(h, SizeIs(3));
  EXPECT_EQ(h[0].comparison.speedup(), 1.0);
  EXPECT_EQ(h[2].comparison.speedup(), 1.2);
  EXPECT_EQ(h[2].candidate_id, "c2");
  EXPECT_EQ(h[2].repo, kRepo);
  EXPECT_TRUE(h[0].comparison.primary());
  EXPECT_EQ(h[0].comparison.bootstrap_low(), 1.68);
  EXPECT_EQ(h[0].comparison.ci_high(), 1.80);
  EXPECT_LT(h[0].decided_at, h[1].decided_at);
  f.since = h[1].decided_at;
  ASSERT_OK_AND_ASSIGN(h, store_->ListMetricComparisons(f));
  EXPECT_THAT(h, SizeIs(2));
  f.repo = "https://elsewhere";
  ASSERT_OK_AND_ASSIGN(h, store_->ListMetricComparisons(f));
  EXPECT_THAT(h, IsEmpty());
  MetricHistoryFilter by_eval;
  by_eval.evaluation_id = store_->FindByCandidate("c0")->id();
  ASSERT_OK_AND_ASSIGN(h, store_->ListMetricComparisons(by_eval));
  ASSERT_THAT(h, SizeIs(2));
  EXPECT_EQ(h[1].comparison.metric(), "serve \"ttft\", p99\\tail {x}");
  EXPECT_EQ(h[1].comparison.speedup(), 0.99);
  EXPECT_EQ(store_->ListMetricComparisons({}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Nodes ------------------------------------------------------------------

TEST_P(StoreContractTest, NodesUpsertByName) {
  clock_.Set(absl::FromUnixSeconds(1750000000));
  ASSERT_OK_AND_ASSIGN(v1::Node n,
                       store_->RegisterNode("gpu-1", Dims("nvidia-h200", 8)));
  EXPECT_THAT(n.id(), ::testing::StartsWith("node-"));
  EXPECT_EQ(n.name(), "gpu-1");
  EXPECT_EQ(n.state(), v1::CALIBRATING);
  EXPECT_EQ(n.dimensions().labels().at("rack"), "r1");
  EXPECT_EQ(n.last_heartbeat().seconds(), 1750000000);

  ASSERT_OK(store_->SetNodeState(n.id(), v1::ACTIVE));
  // Same name, same fingerprint: same id, state kept, dimensions updated.
  clock_.Advance(absl::Seconds(10));
  v1::NodeDimensions more = Dims("nvidia-h200", 4);
  ASSERT_OK_AND_ASSIGN(v1::Node again, store_->RegisterNode("gpu-1", more));
  EXPECT_EQ(again.id(), n.id());
  EXPECT_EQ(again.state(), v1::ACTIVE);
  EXPECT_EQ(again.dimensions().accelerator_count(), 4);
  EXPECT_EQ(again.last_heartbeat().seconds(), 1750000010);
  // New fingerprint: must calibrate again.
  ASSERT_OK_AND_ASSIGN(
      v1::Node refit,
      store_->RegisterNode("gpu-1", Dims("nvidia-h200", 4, "fp-2")));
  EXPECT_EQ(refit.id(), n.id());
  EXPECT_EQ(refit.state(), v1::CALIBRATING);

  clock_.Advance(absl::Seconds(5));
  ASSERT_OK(store_->RecordNodeHeartbeat(n.id()));
  ASSERT_OK_AND_ASSIGN(v1::Node hb, store_->GetNode(n.id()));
  EXPECT_EQ(hb.last_heartbeat().seconds(), 1750000015);

  ASSERT_OK_AND_ASSIGN(v1::Node cpu, store_->RegisterNode("cpu-1", Dims()));
  ASSERT_OK(store_->SetNodeState(cpu.id(), v1::QUARANTINED));
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Node> all, store_->ListNodes({}));
  ASSERT_THAT(all, SizeIs(2));
  EXPECT_EQ(all[0].name(), "cpu-1");
  const v1::NodeState quarantined[] = {v1::QUARANTINED};
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Node> q, store_->ListNodes(quarantined));
  ASSERT_THAT(q, SizeIs(1));
  EXPECT_EQ(q[0].id(), cpu.id());

  EXPECT_EQ(store_->GetNode("node-nope").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->SetNodeState("node-nope", v1::ACTIVE).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->SetNodeState(n.id(), v1::NODE_STATE_UNSPECIFIED).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->RecordNodeHeartbeat("node-nope").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->RegisterNode("", Dims()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->RegisterNode("x", Dims("cpu", 0, "")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Count("nodes"), 2);
}

// A node whose verdict contradicted its samples stays out for good: not
// registering as other hardware, not a calibration in flight, not a state
// set afterwards brings it back.
TEST_P(StoreContractTest, ADistrustedNodeStaysDistrusted) {
  ASSERT_OK_AND_ASSIGN(v1::Node n, store_->RegisterNode("cpu-1", Dims()));
  ASSERT_OK_AND_ASSIGN(int64_t job, store_->EnqueueCalibration(n.id(), 0));
  EXPECT_GT(job, 0);
  std::vector<v1::Lease> calibrating = Claim(n.id(), 1, Dims());
  ASSERT_THAT(calibrating, SizeIs(1));
  ASSERT_OK(store_->SetNodeState(n.id(), v1::DISTRUSTED));

  ASSERT_OK(store_->FinishCalibration(Ref(calibrating[0], n.id()), 0.001, v1::ACTIVE));
  ASSERT_OK_AND_ASSIGN(v1::Node calibrated, store_->GetNode(n.id()));
  EXPECT_EQ(calibrated.state(), v1::DISTRUSTED);
  ASSERT_OK_AND_ASSIGN(v1::Node refit,
                       store_->RegisterNode("cpu-1", Dims("cpu", 0, "fp-other")));
  EXPECT_EQ(refit.id(), n.id());
  EXPECT_EQ(refit.state(), v1::DISTRUSTED);
  absl::Status set = store_->SetNodeState(n.id(), v1::ACTIVE);
  EXPECT_EQ(set.code(), absl::StatusCode::kFailedPrecondition) << set;
  EXPECT_THAT(set.message(), HasSubstr("distrusted"));
  EXPECT_OK(store_->SetNodeState(n.id(), v1::DISTRUSTED));
  ASSERT_OK_AND_ASSIGN(v1::Node still, store_->GetNode(n.id()));
  EXPECT_EQ(still.state(), v1::DISTRUSTED);

  // Other nodes are not affected.
  ASSERT_OK_AND_ASSIGN(v1::Node other, store_->RegisterNode("cpu-2", Dims()));
  ASSERT_OK(store_->SetNodeState(other.id(), v1::ACTIVE));
  ASSERT_OK(store_->SetNodeState(other.id(), v1::QUARANTINED));
}

TEST_P(StoreContractTest, HeartbeatRecordsTheNodeHeartbeat) {
  ASSERT_OK_AND_ASSIGN(v1::Node n, store_->RegisterNode("gpu-1", Dims()));
  SubmitOk(MakeCandidate("c"));
  std::vector<v1::Lease> l = Claim(n.id());
  ASSERT_THAT(l, SizeIs(1));
  clock_.Advance(absl::Seconds(20));
  ASSERT_OK(store_->RenewLease(Ref(l[0], n.id()), absl::Seconds(60)).status());
  ASSERT_OK_AND_ASSIGN(v1::Node after, store_->GetNode(n.id()));
  EXPECT_EQ(Us(after.last_heartbeat()), absl::ToUnixMicros(clock_.Now()));
  EXPECT_EQ(after.current_lease_id(), l[0].id());
}

// ---- Merge queue
// --------------------------------------------------------------

TEST_P(StoreContractTest, MergeQueueLifecycle) {
  v1::Lease rejected = SubmitAndClaim("bad");
  ASSERT_OK(store_->FinishLease(Ref(rejected, "n1"), MakeVerdict(v1::REJECT)));
  absl::Status s =
      store_->EnqueueMerge(rejected.evaluation().id(), "scheduler").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("REJECT"));
  const std::string queued_only = SubmitOk(MakeCandidate("pending")).id();
  EXPECT_EQ(store_->EnqueueMerge(queued_only, "scheduler").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(store_->EnqueueMerge("ev-nope", "scheduler").status().code(),
            absl::StatusCode::kNotFound);

  std::vector<std::string> accepted;
  for (const char* c : {"good-1", "good-2"}) {
    SubmitOk(MakeCandidate(c));
    std::vector<v1::Lease> l = Claim("n1");
    ASSERT_THAT(l, SizeIs(1));
    ASSERT_OK(store_->FinishLease(Ref(l[0], "n1"), MakeVerdict(v1::ACCEPT)));
    accepted.push_back(l[0].evaluation().id());
  }
  ASSERT_OK_AND_ASSIGN(MergeEntry m1,
                       store_->EnqueueMerge(accepted[0], "scheduler"));
  EXPECT_EQ(m1.status.state(), v1::MERGE_QUEUED);
  EXPECT_EQ(m1.target_branch, "main");
  EXPECT_EQ(m1.repo, kRepo);
  ASSERT_OK_AND_ASSIGN(MergeEntry m2,
                       store_->EnqueueMerge(accepted[1], "scheduler"));
  EXPECT_LT(m1.position, m2.position);
  EXPECT_EQ(store_->EnqueueMerge(accepted[0], "scheduler").status().code(),
            absl::StatusCode::kAlreadyExists);

  MergeQueueFilter main_branch;
  main_branch.repo = kRepo;
  main_branch.target_branch = "main";
  ASSERT_OK_AND_ASSIGN(std::vector<MergeEntry> q,
                       store_->ListMergeQueue(main_branch));
  ASSERT_THAT(q, SizeIs(2));
  EXPECT_EQ(q[0].evaluation_id, accepted[0]);

  // The tip moved: re-measure against it, then merge.
  v1::MergeStatus remeasure;
  remeasure.set_state(v1::REMEASURING);
  EXPECT_EQ(
      store_->UpdateMerge(accepted[0], remeasure, "scheduler").status().code(),
      absl::StatusCode::kInvalidArgument);  // needs the new evaluation
  remeasure.set_remeasure_evaluation_id("ev-nope");
  EXPECT_EQ(
      store_->UpdateMerge(accepted[0], remeasure, "scheduler").status().code(),
      absl::StatusCode::kInvalidArgument);
  remeasure.set_remeasure_evaluation_id(queued_only);
  ASSERT_OK_AND_ASSIGN(
      MergeEntry r, store_->UpdateMerge(accepted[0], remeasure, "scheduler"));
  EXPECT_EQ(r.status.state(), v1::REMEASURING);
  // Held for a person, then approved: the approval stays with the entry.
  v1::MergeStatus held;
  held.set_state(v1::AWAITING_APPROVAL);
  ASSERT_OK_AND_ASSIGN(r, store_->UpdateMerge(accepted[0], held, "scheduler"));
  EXPECT_EQ(r.status.state(), v1::AWAITING_APPROVAL);
  EXPECT_EQ(r.status.remeasure_evaluation_id(), queued_only);
  EXPECT_EQ(r.status.approved_by(), "");
  v1::MergeStatus approved = remeasure;
  approved.set_approved_by("maintainer:ana");
  ASSERT_OK_AND_ASSIGN(r, store_->UpdateMerge(accepted[0], approved, "maintainer:ana"));
  EXPECT_EQ(r.status.approved_by(), "maintainer:ana");
  v1::MergeStatus merged;
  merged.set_state(v1::MERGED);
  EXPECT_EQ(
      store_->UpdateMerge(accepted[0], merged, "scheduler").status().code(),
      absl::StatusCode::kInvalidArgument);  // needs the sha
  merged.set_merged_sha("abc123");
  ASSERT_OK(store_->UpdateMerge(accepted[0], merged, "scheduler").status());
  EXPECT_EQ(
      store_->UpdateMerge(accepted[0], merged, "scheduler").status().code(),
      absl::StatusCode::kFailedPrecondition);  // final
  v1::MergeStatus not_merging;
  not_merging.set_state(v1::NOT_MERGING);
  EXPECT_EQ(store_->UpdateMerge(accepted[1], not_merging, "scheduler")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);

  ASSERT_OK_AND_ASSIGN(v1::Evaluation e, store_->GetEvaluation(accepted[0]));
  EXPECT_EQ(e.merge().state(), v1::MERGED);
  EXPECT_EQ(e.merge().merged_sha(), "abc123");
  EXPECT_EQ(e.merge().remeasure_evaluation_id(), queued_only);
  EXPECT_EQ(e.merge().approved_by(), "maintainer:ana");
  ASSERT_OK_AND_ASSIGN(q, store_->ListMergeQueue(main_branch));
  ASSERT_THAT(q, SizeIs(1));  // the live queue
  EXPECT_EQ(q[0].evaluation_id, accepted[1]);
  main_branch.states = {v1::MERGED};
  ASSERT_OK_AND_ASSIGN(q, store_->ListMergeQueue(main_branch));
  ASSERT_THAT(q, SizeIs(1));
  EXPECT_EQ(q[0].status.merged_sha(), "abc123");

  AuditFilter f;
  f.subject = accepted[0];
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> audit, store_->ListAudit(f));
  std::vector<std::string> actions;
  for (const AuditEntry& a : audit) actions.push_back(a.action);
  EXPECT_THAT(actions, ElementsAre("submit", "merge.enqueue", "merge.update", "merge.update",
                                   "merge.update", "merge.update"));
}

// ---- Audit ------------------------------------------------------------------

TEST_P(StoreContractTest, AuditLogAppendsAndPages) {
  std::vector<int64_t> ids;
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(1));
    AuditEntry e;
    e.actor = i % 2 == 0 ? "admin:ana" : "agent:7";
    e.action = "node.drain";
    e.subject = absl::StrCat("node-", i);
    e.detail = "maintenance";
    ASSERT_OK_AND_ASSIGN(int64_t id, store_->AppendAudit(e));
    ids.push_back(id);
  }
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
  AuditFilter f;
  f.limit = 2;
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> page1, store_->ListAudit(f));
  ASSERT_THAT(page1, SizeIs(2));
  f.after_id = page1.back().id;
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> page2, store_->ListAudit(f));
  ASSERT_THAT(page2, SizeIs(2));
  EXPECT_EQ(page2[0].id, ids[2]);
  EXPECT_EQ(page2[0].subject, "node-2");
  EXPECT_EQ(page2[0].at, absl::FromUnixSeconds(1700000003));

  AuditFilter by_actor;
  by_actor.actor = "agent:7";
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> agent,
                       store_->ListAudit(by_actor));
  EXPECT_THAT(agent, SizeIs(2));
  AuditFilter since;
  since.since = absl::FromUnixSeconds(1700000004);
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> late, store_->ListAudit(since));
  EXPECT_THAT(late, SizeIs(2));

  EXPECT_EQ(store_->AppendAudit({}).status().code(),
            absl::StatusCode::kInvalidArgument);
  AuditFilter bad;
  bad.limit = 0;
  EXPECT_EQ(store_->ListAudit(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Count("audit_log"), 5);
}

// ---- Feedback bundles ---------------------------------------------------

v1::FeedbackBundle MakeBundle(absl::string_view summary, int log_bytes) {
  v1::FeedbackBundle b;
  v1::FeedbackFile* f = b.add_files();
  f->set_path("feedback.json");
  f->set_content(std::string(summary));
  f = b.add_files();
  f->set_path("logs/bench-serve-candidate-0.out");
  f->set_content(std::string(log_bytes, 'x'));
  b.add_omitted("traces/serve-candidate.json");
  return b;
}

// ---- Campaigns ------------------------------------------------------------

TEST_P(StoreContractTest, ACampaignIsKeptOnceAndItsExperimentsListedByIt) {
  clock_.Set(absl::FromUnixSeconds(1800000000));
  v1::Campaign c;
  c.set_id("kda-3x");
  c.set_repo(std::string(kRepo));
  c.set_branch("main");
  c.set_owner("agent:campaign-1");
  c.set_start_sha("b0b0b0");
  c.mutable_goal()->set_metric("serve.tok_s");
  c.mutable_goal()->set_min_speedup(3);
  c.add_proposers()->mutable_patch_catalog()->set_dir("patches");
  EXPECT_EQ(store_->GetCampaign("kda-3x").status().code(), absl::StatusCode::kNotFound);
  ASSERT_OK_AND_ASSIGN(v1::Campaign stored, store_->PutCampaign(c));
  EXPECT_EQ(stored.created_at().seconds(), 1800000000);
  // The same spec again (a resumed run) returns the stored campaign as it
  // was recorded; another spec under the id is refused and changes nothing.
  clock_.Advance(absl::Seconds(60));
  ASSERT_OK_AND_ASSIGN(v1::Campaign again, store_->PutCampaign(c));
  EXPECT_EQ(again.created_at().seconds(), 1800000000);
  v1::Campaign other = c;
  other.mutable_goal()->set_min_speedup(2);
  EXPECT_EQ(store_->PutCampaign(other).status().code(), absl::StatusCode::kAlreadyExists);
  ASSERT_OK_AND_ASSIGN(v1::Campaign got, store_->GetCampaign("kda-3x"));
  EXPECT_EQ(got.goal().min_speedup(), 3);
  EXPECT_EQ(got.proposers(0).patch_catalog().dir(), "patches");
  EXPECT_EQ(store_->PutCampaign(v1::Campaign()).status().code(),
            absl::StatusCode::kInvalidArgument);

  // Its history: the evaluations whose candidates name it, newest first.
  for (const char* id : {"x1", "x2", "y1"}) {
    v1::Candidate cand = MakeCandidate(id, v1::EXPERIMENT, kRepo, "agent:campaign-1");
    if (id[0] == 'x') cand.set_campaign("kda-3x");
    SubmitOk(cand);
  }
  v1::ListEvaluationsRequest req;
  req.set_campaign("kda-3x");
  ASSERT_OK_AND_ASSIGN(v1::ListEvaluationsResponse listed, store_->ListEvaluations(req));
  ASSERT_THAT(listed.evaluations(), SizeIs(2));
  EXPECT_EQ(listed.evaluations(0).candidate().id(), "x2");
  EXPECT_EQ(listed.evaluations(1).candidate().id(), "x1");
}

TEST_P(StoreContractTest, FeedbackIsKeptWithTheEvaluationAndReplacedByALaterUpload) {
  clock_.Set(absl::FromUnixSeconds(1800000000));
  v1::Lease l = SubmitAndClaim("c", /*max_attempts=*/2);
  const std::string id = l.evaluation().id();
  EXPECT_EQ(store_->GetFeedback(id, true).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store_->GetFeedback("ev-none", true).status().code(), absl::StatusCode::kNotFound);

  // Compressible: the store keeps it deflated.
  ASSERT_OK(store_->PutFeedback(Ref(l, "n1"), MakeBundle(R"({"decision":"accept"})", 200000),
                                R"({"decision":"accept"})", FeedbackPolicy{}));
  ASSERT_OK_AND_ASSIGN(FeedbackRecord got, store_->GetFeedback(id, true));
  EXPECT_EQ(got.evaluation_id, id);
  EXPECT_EQ(got.lease_id, l.id());
  EXPECT_EQ(got.summary_json, R"({"decision":"accept"})");
  EXPECT_EQ(got.files, 2);
  EXPECT_EQ(got.bytes, 200000 + 21);
  EXPECT_EQ(got.recorded_at, absl::FromUnixSeconds(1800000000));
  EXPECT_EQ(got.files_dropped_at, absl::InfinitePast());
  ASSERT_THAT(got.bundle.files(), SizeIs(2));
  EXPECT_EQ(got.bundle.files(1).content(), std::string(200000, 'x'));
  EXPECT_THAT(got.bundle.omitted(), ElementsAre("traces/serve-candidate.json"));
  ASSERT_OK_AND_ASSIGN(int64_t stored,
                       db_->QueryInt("SELECT length(content) FROM feedback_bundles"));
  EXPECT_LT(stored, 10000);
  // Without files: the summary and counts only.
  ASSERT_OK_AND_ASSIGN(FeedbackRecord summary, store_->GetFeedback(id, false));
  EXPECT_THAT(summary.bundle.files(), IsEmpty());
  EXPECT_EQ(summary.files, 2);

  // The lease expires; the next attempt's upload replaces the first.
  clock_.Advance(absl::Minutes(5));
  ASSERT_OK(store_->ReclaimExpiredLeases(10).status());
  EXPECT_EQ(store_->PutFeedback(Ref(l, "n1"), MakeBundle("{}", 1), "{}", FeedbackPolicy{})
                .code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<v1::Lease> again = Claim("n2");
  ASSERT_THAT(again, SizeIs(1));
  ASSERT_OK(store_->PutFeedback(Ref(again[0], "n2"), MakeBundle(R"({"decision":"reject"})", 3),
                                R"({"decision":"reject"})", FeedbackPolicy{}));
  ASSERT_OK_AND_ASSIGN(got, store_->GetFeedback(id, true));
  EXPECT_EQ(got.lease_id, again[0].id());
  EXPECT_EQ(got.summary_json, R"({"decision":"reject"})");
  EXPECT_EQ(got.bundle.files(1).content(), "xxx");
  EXPECT_EQ(Count("feedback_bundles"), 1);
}

TEST_P(StoreContractTest, FeedbackOverTheCapOrWithBadPathsWritesNothing) {
  v1::Lease l = SubmitAndClaim("c");
  FeedbackPolicy small;
  small.max_bytes = 1000;
  EXPECT_EQ(store_->PutFeedback(Ref(l, "n1"), MakeBundle("{}", 1000), "{}", small).code(),
            absl::StatusCode::kResourceExhausted);
  for (const char* path : {"../escape", "/abs", "a/./b", ""}) {
    v1::FeedbackBundle bad = MakeBundle("{}", 1);
    bad.mutable_files(1)->set_path(path);
    EXPECT_EQ(store_->PutFeedback(Ref(l, "n1"), bad, "{}", small).code(),
              absl::StatusCode::kInvalidArgument)
        << path;
  }
  v1::FeedbackBundle twice = MakeBundle("{}", 1);
  twice.mutable_files(1)->set_path("feedback.json");
  EXPECT_EQ(store_->PutFeedback(Ref(l, "n1"), twice, "{}", small).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->PutFeedback(Ref(l, "other-node"), MakeBundle("{}", 1), "{}", small).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Count("feedback_bundles"), 0);
}

TEST_P(StoreContractTest, RetentionDropsTheFilesOfABranchsOldestBundlesAndKeepsTheirSummaries) {
  FeedbackPolicy keep2;
  keep2.keep_per_branch = 2;
  std::vector<std::string> main_ids;
  for (int i = 0; i < 4; ++i) {
    clock_.Set(absl::FromUnixSeconds(1800000000 + i));
    v1::Lease l = SubmitAndClaim(absl::StrCat("m", i));
    main_ids.push_back(l.evaluation().id());
    ASSERT_OK(store_->PutFeedback(Ref(l, "n1"), MakeBundle(absl::StrCat(i), 10),
                                  absl::StrCat(i), keep2));
  }
  // Another branch of the same repository keeps its own two.
  v1::Candidate other = MakeCandidate("r0");
  other.set_target_branch("release");
  SubmitOk(other);
  std::vector<v1::Lease> r = Claim("n1");
  ASSERT_THAT(r, SizeIs(1));
  ASSERT_OK(store_->PutFeedback(Ref(r[0], "n1"), MakeBundle("r", 10), "r", keep2));

  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(FeedbackRecord got, store_->GetFeedback(main_ids[i], true));
    EXPECT_EQ(got.summary_json, absl::StrCat(i));
    EXPECT_EQ(got.files, 2);
    EXPECT_THAT(got.bundle.omitted(), SizeIs(1));
    if (i < 2) {
      EXPECT_THAT(got.bundle.files(), IsEmpty()) << i;
      EXPECT_EQ(got.files_dropped_at, absl::FromUnixSeconds(1800000000 + i + 2)) << i;
    } else {
      EXPECT_THAT(got.bundle.files(), SizeIs(2)) << i;
      EXPECT_EQ(got.files_dropped_at, absl::InfinitePast()) << i;
    }
  }
  ASSERT_OK_AND_ASSIGN(FeedbackRecord release, store_->GetFeedback(r[0].evaluation().id(), true));
  EXPECT_THAT(release.bundle.files(), SizeIs(2));
}

INSTANTIATE_TEST_SUITE_P(Backends, StoreContractTest,
                         ::testing::Values("sqlite", "postgresql"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace densegate::results
