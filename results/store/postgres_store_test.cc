// PostgreSQL only: what happens when the connection is lost, and the
// statistics the claim is planned from.
//
// Sessions are killed for real (pg_terminate_backend from a second
// connection), between calls and in the middle of a transaction; the store
// must answer UnavailableError, leave nothing half-written, and reconnect.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/densegate.pb.h"
#include "results/store/clock.h"
#include "results/store/internal/pg_driver.h"
#include "results/store/internal/sql.h"
#include "results/store/internal/sql_store.h"
#include "results/store/store.h"
#include "results/store/testing/postgres_for_test.h"
#include "results/store/testing/status_assertions.h"
#include "results/store/testing/test_database.h"
#include "results/store/testing/thread_signals.h"

// libpqxx 6.4 leaks the libpq result of the statement that discovers a
// broken connection (in register_prepared and in its internal exec); these
// tests break connections on purpose. Only leaks with libpqxx on the
// allocation stack are ignored, and only in this test.
extern "C" __attribute__((visibility("default"), used)) const char*
__lsan_default_suppressions() {
  return "leak:libpqxx-6.4.so\n";
}

namespace densegate::results {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

SubmitParams Params(absl::string_view id) {
  SubmitParams p;
  v1::Candidate& c = p.candidate;
  c.set_id(std::string(id));
  c.set_repo("https://git.example/densegate.git");
  c.set_target_branch("main");
  c.set_baseline_sha("b0");
  c.set_candidate_sha(absl::StrCat("c-", id));
  c.set_kind(v1::CI);
  c.set_submitter("ci");
  return p;
}

v1::Verdict Accept() {
  v1::Verdict v;
  v.set_decision(v1::ACCEPT);
  v1::MetricComparison* m = v.add_metrics();
  m->set_metric("m");
  m->set_speedup(1.1);
  return v;
}

void ExpectConnectionLost(const absl::Status& s) {
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("connection to PostgreSQL was lost"));
  EXPECT_THAT(s.message(), HasSubstr("reconnects"));
}

using testing::Counter;
using testing::Event;

// A ClaimJobs statement hook that holds the first claim's statement until
// `release`, and counts the claim statements that began.
struct HeldClaim {
  std::function<void(absl::string_view, int)> Hook() {
    return [this](absl::string_view op, int index) {
      if (op != "ClaimJobs" || index != 0) return;
      bool first;
      {
        std::lock_guard<std::mutex> lock(mu);
        first = ++statements == 1;
      }
      if (!first) return;
      inside.Set();
      release.Wait();
    };
  }
  int Statements() {
    std::lock_guard<std::mutex> lock(mu);
    return statements;
  }

  Event inside;
  Event release;
  std::mutex mu;
  int statements = 0;
};

ClaimRequest ClaimFor(absl::string_view node) {
  ClaimRequest req;
  req.node_id = std::string(node);
  return req;
}

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::CreatePostgresForThisTest(&db_); }

  // A store whose driver calls `hook` before each statement.
  absl::StatusOr<std::unique_ptr<Store>> OpenWithHook(
      std::function<void(absl::string_view, int)> hook,
      int max_concurrent_claims = StoreOptions().max_concurrent_claims,
      internal::SqlStoreHooks store_hooks = {}) {
    internal::DriverHooks hooks;
    hooks.before_statement = std::move(hook);
    absl::StatusOr<std::unique_ptr<internal::SqlDriver>> driver =
        internal::OpenPgDriver(db_->url(), 4, std::move(hooks));
    if (!driver.ok()) return driver.status();
    StoreOptions options;
    options.clock = &clock_;
    options.max_concurrent_claims = max_concurrent_claims;
    return internal::OpenSqlStore(*std::move(driver), options,
                                  std::move(store_hooks));
  }

  // Kills the store's sessions when statement `index` of `op` is about to
  // run (once).
  std::function<void(absl::string_view, int)> KillAt(std::string op,
                                                     int index) {
    return [this, op, index](absl::string_view at_op, int at_index) {
      if (!armed_ || at_op != op || at_index != index) return;
      armed_ = false;
      absl::StatusOr<int> killed = db_->TerminateOtherSessions();
      ASSERT_TRUE(killed.ok()) << killed.status();
      EXPECT_GE(*killed, 1);
    };
  }

  int64_t Count(absl::string_view table) {
    absl::StatusOr<int64_t> n =
        db_->QueryInt(absl::StrCat("SELECT count(*) FROM ", table));
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : -1;
  }

  ManualClock clock_;
  std::unique_ptr<testing::TestDatabase> db_;
  bool armed_ = false;
};

TEST_F(PostgresStoreTest, LostIdleConnectionIsUnavailableThenReconnects) {
  StoreOptions options;
  options.clock = &clock_;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenStore(db_->url(), options));
  ASSERT_OK_AND_ASSIGN(SubmitResult r, store->Submit(Params("c1")));
  ASSERT_OK_AND_ASSIGN(int killed, db_->TerminateOtherSessions());
  EXPECT_EQ(killed, 1);  // the store's one pooled connection

  // The next call finds its connection dead: a clear, retriable error.
  absl::StatusOr<v1::Evaluation> first =
      store->GetEvaluation(r.evaluation.id());
  ExpectConnectionLost(first.status());
  // The one after reconnects, and the data is all there.
  ASSERT_OK_AND_ASSIGN(v1::Evaluation e,
                       store->GetEvaluation(r.evaluation.id()));
  EXPECT_EQ(e.state(), v1::QUEUED);
  ASSERT_OK_AND_ASSIGN(SubmitResult r2, store->Submit(Params("c2")));
  EXPECT_FALSE(r2.deduplicated);
}

// A burst of submissions into a queue PostgreSQL last analyzed when it was
// empty left the claim planned for an empty queue, sorting the whole queue
// on every claim (measured: 120 ms a claim with 112,000 queued, 0.05 ms
// once analyzed) until autovacuum came by. The store analyzes `jobs`
// itself after every 1,000 submissions.
TEST_F(PostgresStoreTest, EveryThousandSubmissionsAnalyzeTheQueue) {
  StoreOptions options;
  options.clock = &clock_;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenStore(db_->url(), options));
  // Manual (not autovacuum's) ANALYZE runs of `jobs`.
  auto analyzed = [&] {
    absl::StatusOr<int64_t> n = db_->QueryInt(
        "SELECT analyze_count FROM pg_stat_user_tables WHERE relname = "
        "'jobs'");
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : -1;
  };
  for (int i = 0; i < 999; ++i) {
    ASSERT_OK(store->Submit(Params(absl::StrCat("c", i))).status());
  }
  // A resubmission queues nothing, so it does not count.
  ASSERT_OK_AND_ASSIGN(SubmitResult again, store->Submit(Params("c0")));
  EXPECT_TRUE(again.deduplicated);
  EXPECT_EQ(analyzed(), 0);
  ASSERT_OK(store->Submit(Params("c999")).status());
  EXPECT_EQ(analyzed(), 1);
  EXPECT_EQ(Count("jobs"), 1000);
}

TEST_F(PostgresStoreTest, SubmitInterruptedMidwayLeavesNothingBehind) {
  // Statements of Submit: 0 repo insert, 1 repo select, 2 candidate insert,
  // 3 evaluation insert, ... Kill the session after the first three ran.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenWithHook(KillAt("Submit", 3)));
  armed_ = true;
  absl::StatusOr<SubmitResult> r = store->Submit(Params("c1"));
  EXPECT_FALSE(armed_) << "the hook did not fire";
  ExpectConnectionLost(r.status());
  EXPECT_THAT(r.status().message(), HasSubstr("nothing was written"));
  for (const char* table :
       {"repos", "candidates", "evaluations", "jobs", "audit_log"}) {
    EXPECT_EQ(Count(table), 0) << table;
  }
  // Retrying works and is not mistaken for a duplicate.
  ASSERT_OK_AND_ASSIGN(SubmitResult again, store->Submit(Params("c1")));
  EXPECT_FALSE(again.deduplicated);
  EXPECT_EQ(Count("evaluations"), 1);
}

TEST_F(PostgresStoreTest, ClaimInterruptedLeavesTheJobQueued) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenWithHook(KillAt("ClaimJobs", 0)));
  ASSERT_OK(store->Submit(Params("c1")).status());
  armed_ = true;
  ClaimRequest req;
  req.node_id = "n1";
  req.max_jobs = 4;
  absl::StatusOr<std::vector<v1::Lease>> lost = store->ClaimJobs(req);
  ExpectConnectionLost(lost.status());
  // One statement in autocommit mode: the client cannot tell whether it
  // ran, and says so.
  EXPECT_THAT(lost.status().message(),
              HasSubstr("may or may not have taken effect"));
  EXPECT_EQ(Count("leases"), 0);
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store->CountJobs());
  EXPECT_EQ(counts.queued, 1);
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> leases, store->ClaimJobs(req));
  ASSERT_THAT(leases, SizeIs(1));
  EXPECT_EQ(leases[0].evaluation().attempt(),
            1);  // the lost claim did not count
}

TEST_F(PostgresStoreTest, ClaimsTakeTurnsAndOtherCallsDoNotWait) {
  HeldClaim held;
  Event second_waits;
  internal::SqlStoreHooks store_hooks;
  store_hooks.claim_waits = [&] { second_waits.Set(); };
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Store> store,
      OpenWithHook(held.Hook(), /*max_concurrent_claims=*/1, store_hooks));
  ASSERT_OK(store->Submit(Params("c1")).status());
  ASSERT_OK(store->Submit(Params("c2")).status());
  absl::StatusOr<std::vector<v1::Lease>> first, second;
  std::thread first_claim([&] { first = store->ClaimJobs(ClaimFor("n1")); });
  held.inside.Wait();
  // A call that claims nothing does not wait for the claim's turn. (Both
  // jobs are queued: the held claim's statement has not run.)
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store->CountJobs());
  EXPECT_EQ(counts.queued, 2);
  std::thread second_claim([&] { second = store->ClaimJobs(ClaimFor("n2")); });
  second_waits.Wait();
  // The second claim waits for the first's turn: its statement has not
  // begun.
  EXPECT_EQ(held.Statements(), 1);
  held.release.Set();
  first_claim.join();
  second_claim.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(held.Statements(), 2);
  ASSERT_THAT(*first, SizeIs(1));
  ASSERT_THAT(*second, SizeIs(1));
  EXPECT_NE(first->front().evaluation().id(),
            second->front().evaluation().id());
}

TEST_F(PostgresStoreTest, WithoutALimitClaimsRunTogether) {
  HeldClaim held;
  int waits = 0;
  internal::SqlStoreHooks store_hooks;
  store_hooks.claim_waits = [&] { ++waits; };
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Store> store,
      OpenWithHook(held.Hook(), /*max_concurrent_claims=*/0, store_hooks));
  ASSERT_OK(store->Submit(Params("c1")).status());
  ASSERT_OK(store->Submit(Params("c2")).status());
  absl::StatusOr<std::vector<v1::Lease>> first;
  std::thread first_claim([&] { first = store->ClaimJobs(ClaimFor("n1")); });
  held.inside.Wait();
  // The first claim is held before its statement runs; a second claim
  // runs meanwhile.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> second,
                       store->ClaimJobs(ClaimFor("n2")));
  EXPECT_THAT(second, SizeIs(1));
  EXPECT_EQ(held.Statements(), 2);
  held.release.Set();
  first_claim.join();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_THAT(*first, SizeIs(1));
  EXPECT_NE(first->front().evaluation().id(), second.front().evaluation().id());
  EXPECT_EQ(waits, 0);
}

// Finishes that wait for the claim turn together: holds one ClaimJobs
// statement (holding the turn of a store with a limit of 1) while the
// finishes queue up behind it, and counts the finish statements.
class HeldTurn {
 public:
  std::function<void(absl::string_view, int)> Hook() {
    return [this](absl::string_view op, int) {
      bool hold = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (op == "FinishLeaseAndClaimNext") ++finish_statements_;
        if (op == "ClaimJobs" && armed_) {
          armed_ = false;
          hold = true;
        }
      }
      if (!hold) return;
      inside.Set();
      release.Wait();
    };
  }
  std::function<void()> WaitHook() { return waits_.Hook(); }
  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
  }
  void AwaitWaits(int n) { waits_.AwaitAtLeast(n); }
  int finish_statements() {
    std::lock_guard<std::mutex> lock(mu_);
    return finish_statements_;
  }

  Event inside;
  Event release;

 private:
  std::mutex mu_;
  bool armed_ = false;
  int finish_statements_ = 0;
  Counter waits_;
};

v1::NodeDimensions NodeDims(absl::string_view kind) {
  v1::NodeDimensions d;
  d.set_accelerator_kind(std::string(kind));
  d.set_accelerator_count(kind == "cpu" ? 0 : 8);
  d.set_fingerprint("fp-1");
  return d;
}

// Three nodes, each holding a lease, finish while the claim turn is held:
// the first finish waits for the turn alone, the next two wait behind it
// and run as one batch. Returns each finish's result, in that order.
struct BatchRun {
  std::vector<std::string> nodes;
  std::vector<absl::StatusOr<NextClaim>> next;
  int finish_statements = 0;
};
BatchRun FinishThreeWhileTheTurnIsHeld(
    Store& store, HeldTurn& held, const std::vector<std::string>& kinds,
    std::function<void(const std::vector<std::string>& nodes)> before_finishes =
        nullptr) {
  BatchRun out;
  std::vector<std::string> leases;
  for (size_t i = 0; i < kinds.size(); ++i) {
    absl::StatusOr<v1::Node> node =
        store.RegisterNode(absl::StrCat("node-", i), NodeDims(kinds[i]));
    EXPECT_TRUE(node.ok()) << node.status();
    if (!node.ok()) return out;
    EXPECT_TRUE(store.SetNodeState(node->id(), v1::ACTIVE).ok());
    ClaimRequest req;
    req.node_id = node->id();
    req.dimensions = NodeDims(kinds[i]);
    absl::StatusOr<std::vector<v1::Lease>> lease = store.ClaimJobs(req);
    EXPECT_TRUE(lease.ok()) << lease.status();
    if (!lease.ok() || lease->size() != 1) return out;
    out.nodes.push_back(node->id());
    leases.push_back(lease->front().id());
  }
  if (before_finishes) before_finishes(out.nodes);
  held.Arm();
  std::thread holder([&] { (void)store.ClaimJobs(ClaimFor("idle-node")); });
  held.inside.Wait();
  out.next.resize(kinds.size(), absl::UnknownError("not run"));
  std::vector<std::thread> finishes;
  for (size_t i = 0; i < kinds.size(); ++i) {
    finishes.emplace_back([&, i] {
      out.next[i] = store.FinishLeaseAndClaimNext({leases[i], out.nodes[i]},
                                                  Accept(), absl::Minutes(5));
    });
    held.AwaitWaits(static_cast<int>(i) + 1);
  }
  const int before = held.finish_statements();
  held.release.Set();
  holder.join();
  for (std::thread& t : finishes) t.join();
  out.finish_statements = held.finish_statements() - before;
  return out;
}

class PostgresBatchTest : public PostgresStoreTest {
 protected:
  // A store with one claim statement at a time, whose turn `held` can hold.
  absl::StatusOr<std::unique_ptr<Store>> OpenWithHeldTurn() {
    internal::SqlStoreHooks store_hooks;
    store_hooks.claim_waits = held.WaitHook();
    return OpenWithHook(held.Hook(), /*max_concurrent_claims=*/1, store_hooks);
  }
  // Submits `n` candidates (no requirements); their evaluations in order.
  std::vector<std::string> SubmitInOrder(Store& store, int n) {
    std::vector<std::string> evaluations;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<SubmitResult> r =
          store.Submit(Params(absl::StrCat("c", i)));
      EXPECT_TRUE(r.ok()) << r.status();
      evaluations.push_back(r.ok() ? r->evaluation.id() : "");
    }
    return evaluations;
  }

  HeldTurn held;
};

TEST_F(PostgresBatchTest, FinishesWaitingTogetherRunAsOneStatement) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenWithHeldTurn());
  std::vector<std::string> evaluations = SubmitInOrder(*store, 7);
  // Jobs 0-2 are leased to the three nodes first; the held claim (of a node
  // that is not registered) takes job 3 once released.
  BatchRun run =
      FinishThreeWhileTheTurnIsHeld(*store, held, {"cpu", "cpu", "cpu"});
  ASSERT_EQ(run.next.size(), 3u);
  EXPECT_EQ(run.finish_statements, 2);
  // The store counts them too: one lease alone, then two together.
  EXPECT_EQ(store->finish_batch_counts().statements, 2);
  EXPECT_EQ(store->finish_batch_counts().leases, 3);
  // In arrival order, each node gets the next job in queue order.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(run.next[i].ok()) << i << ": " << run.next[i].status();
    EXPECT_EQ(run.next[i]->node_state, v1::ACTIVE);
    ASSERT_TRUE(run.next[i]->lease.has_value()) << i;
    EXPECT_EQ(run.next[i]->lease->evaluation().id(), evaluations[4 + i]) << i;
    EXPECT_EQ(run.next[i]->lease->evaluation().state(), v1::RUNNING) << i;
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK_AND_ASSIGN(v1::Evaluation e,
                         store->GetEvaluation(evaluations[i]));
    EXPECT_EQ(e.state(), v1::FINISHED) << i;
    EXPECT_EQ(e.verdict().decision(), v1::ACCEPT) << i;
  }
  EXPECT_EQ(Count("verdicts"), 3);
  EXPECT_EQ(Count("metric_comparisons"), 3);
  EXPECT_EQ(Count("leases WHERE state = 1"), 4);
}

TEST_F(PostgresBatchTest, ABatchOfUnlikeNodesClaimsForEachAlone) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenWithHeldTurn());
  // Two jobs for the GPU node, then CPU work for anyone. The cpu-only jobs
  // run anywhere (no requirements); the GPU jobs only on an H200.
  std::vector<std::string> evaluations;
  for (int i = 0; i < 8; ++i) {
    SubmitParams p = Params(absl::StrCat("c", i));
    if (i == 0 || i == 5) p.requirements.accelerator_kind = "nvidia-h200";
    ASSERT_OK_AND_ASSIGN(SubmitResult r, store->Submit(p));
    evaluations.push_back(r.evaluation.id());
  }
  // node-0 (cpu) takes job 1, node-1 (cpu) job 2, node-2 (gpu) job 0; the
  // held claim takes job 3. Then node-1 and node-2 finish in one batch:
  // node-1 must get job 4 and node-2 the other GPU job, 5.
  BatchRun run = FinishThreeWhileTheTurnIsHeld(*store, held,
                                               {"cpu", "cpu", "nvidia-h200"});
  ASSERT_EQ(run.next.size(), 3u);
  std::vector<std::string> got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(run.next[i].ok()) << i << ": " << run.next[i].status();
    ASSERT_TRUE(run.next[i]->lease.has_value()) << i;
    got.push_back(run.next[i]->lease->evaluation().id());
  }
  // node-0's finish ran alone first and took job 4 (the first it matches).
  EXPECT_EQ(got[0], evaluations[4]);
  EXPECT_EQ(got[1], evaluations[6]);
  EXPECT_EQ(got[2], evaluations[5]);
  EXPECT_EQ(Count("verdicts"), 3);
}

TEST_F(PostgresBatchTest, ABatchLeavesAJobPinnedToOneOfItsNodesToThatNode) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenWithHeldTurn());
  std::vector<std::string> evaluations = SubmitInOrder(*store, 7);
  // Once the nodes hold jobs 0-2, a calibration job pinned to node-2: it
  // comes before all other work for node-2 and for no other node.
  BatchRun run = FinishThreeWhileTheTurnIsHeld(
      *store, held, {"cpu", "cpu", "cpu"},
      [&](const std::vector<std::string>& nodes) {
        ASSERT_OK(store->EnqueueCalibration(nodes[2], 3).status());
      });
  ASSERT_EQ(run.next.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(run.next[i].ok()) << i << ": " << run.next[i].status();
    ASSERT_TRUE(run.next[i]->lease.has_value()) << i;
  }
  // node-0 alone took job 4 (the held claim took 3); node-1 and node-2
  // finished together.
  EXPECT_EQ(run.next[0]->lease->evaluation().id(), evaluations[4]);
  EXPECT_EQ(run.next[1]->lease->evaluation().id(), evaluations[5]);
  EXPECT_EQ(run.next[2]->lease->job_kind(), v1::CALIBRATION);
  EXPECT_EQ(Count("verdicts"), 3);
}

TEST_F(PostgresStoreTest, FinishInterruptedBeforeItsStatementCanBeRetried) {
  // On PostgreSQL a successful FinishLease is one statement (index 0).
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenWithHook(KillAt("FinishLease", 0)));
  ASSERT_OK_AND_ASSIGN(SubmitResult r, store->Submit(Params("c1")));
  ClaimRequest req;
  req.node_id = "n1";
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> leases, store->ClaimJobs(req));
  ASSERT_THAT(leases, SizeIs(1));
  const LeaseRef ref{leases[0].id(), "n1"};
  armed_ = true;
  ExpectConnectionLost(store->FinishLease(ref, Accept()));
  EXPECT_FALSE(armed_);
  EXPECT_EQ(Count("verdicts"), 0);
  EXPECT_EQ(Count("metric_comparisons"), 0);
  ASSERT_OK_AND_ASSIGN(v1::Evaluation running,
                       store->GetEvaluation(r.evaluation.id()));
  EXPECT_EQ(running.state(), v1::RUNNING);
  // The lease is still live: the retry writes the verdict, once.
  ASSERT_OK(store->FinishLease(ref, Accept()));
  EXPECT_EQ(Count("verdicts"), 1);
  EXPECT_EQ(store->FinishLease(ref, Accept()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(PostgresStoreTest, FinishAndClaimLostWithThePipelineCanBeRetried) {
  // FinishLeaseAndClaimNext's statement goes to the store's pipelined
  // connection (index 0 of its op); all sessions die just before it is
  // sent.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenWithHook(KillAt("FinishLeaseAndClaimNext", 0)));
  ASSERT_OK_AND_ASSIGN(SubmitResult first, store->Submit(Params("c1")));
  ASSERT_OK_AND_ASSIGN(SubmitResult second, store->Submit(Params("c2")));
  ASSERT_OK_AND_ASSIGN(v1::Node node,
                       store->RegisterNode("node-0", NodeDims("cpu")));
  ASSERT_OK(store->SetNodeState(node.id(), v1::ACTIVE));
  ClaimRequest req;
  req.node_id = node.id();
  req.dimensions = NodeDims("cpu");
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> leases, store->ClaimJobs(req));
  ASSERT_THAT(leases, SizeIs(1));
  const LeaseRef ref{leases[0].id(), node.id()};
  armed_ = true;
  absl::StatusOr<NextClaim> lost =
      store->FinishLeaseAndClaimNext(ref, Accept(), absl::Minutes(5));
  EXPECT_FALSE(armed_);
  ExpectConnectionLost(lost.status());
  EXPECT_THAT(lost.status().message(),
              HasSubstr("may or may not have taken effect"));
  EXPECT_EQ(Count("verdicts"), 0);
  // The retry reconnects, writes the verdict once and leases the next job.
  ASSERT_OK_AND_ASSIGN(NextClaim next, store->FinishLeaseAndClaimNext(
                                           ref, Accept(), absl::Minutes(5)));
  EXPECT_EQ(Count("verdicts"), 1);
  ASSERT_TRUE(next.lease.has_value());
  EXPECT_EQ(next.lease->evaluation().id(), second.evaluation.id());
  EXPECT_EQ(Count(absl::StrCat("verdicts WHERE evaluation_id = '",
                               first.evaluation.id(), "'")),
            1);
}

TEST_F(PostgresStoreTest, ConnectionLostAtCommitSaysTheOutcomeIsUnknown) {
  // The session dies after Submit's statements ran, before COMMIT reached
  // the server: the client cannot know whether it committed, and says so.
  // (It did not: nothing is there, and the retry is no duplicate.)
  internal::DriverHooks hooks;
  hooks.before_commit = [this](absl::string_view op) {
    if (!armed_ || op != "Submit") return;
    armed_ = false;
    absl::StatusOr<int> killed = db_->TerminateOtherSessions();
    ASSERT_TRUE(killed.ok()) << killed.status();
  };
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<internal::SqlDriver> driver,
                       internal::OpenPgDriver(db_->url(), 4, std::move(hooks)));
  StoreOptions options;
  options.clock = &clock_;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       internal::OpenSqlStore(std::move(driver), options));
  armed_ = true;
  absl::Status s = store->Submit(Params("c1")).status();
  EXPECT_FALSE(armed_);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(s.message(), HasSubstr("outcome is unknown"));
  EXPECT_EQ(Count("evaluations"), 0);
  ASSERT_OK_AND_ASSIGN(SubmitResult again, store->Submit(Params("c1")));
  EXPECT_FALSE(again.deduplicated);
}

TEST_F(PostgresStoreTest, EveryPooledConnectionIsReplacedAfterARestart) {
  // Several threads leave several pooled connections; all are killed (as a
  // server restart would); the store recovers after one Unavailable.
  StoreOptions options;
  options.clock = &clock_;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store,
                       OpenStore(db_->url(), options));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 5; ++i) {
        EXPECT_TRUE(store->Submit(Params(absl::StrCat("t", t, "-", i))).ok());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  // A claim opens the pipelined connection too.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> first,
                       store->ClaimJobs(ClaimFor("n1")));
  ASSERT_THAT(first, SizeIs(1));
  ASSERT_OK_AND_ASSIGN(int killed, db_->TerminateOtherSessions());
  EXPECT_GE(killed, 2);
  ExpectConnectionLost(store->CountJobs().status());
  ASSERT_OK_AND_ASSIGN(QueueCounts counts, store->CountJobs());
  EXPECT_EQ(counts.queued, 19);
  // The dead pooled connection also dropped the idle pipelined one: the
  // next claim reconnects instead of failing.
  ASSERT_OK_AND_ASSIGN(std::vector<v1::Lease> second,
                       store->ClaimJobs(ClaimFor("n2")));
  EXPECT_THAT(second, SizeIs(1));
}

}  // namespace
}  // namespace densegate::results
