// PgPipeline against a real PostgreSQL server (DENSEGATE_PG_URL): results
// reach their own callers, errors stay with their statement, statements
// queued behind a running one run after it, a lost connection fails what
// is in flight and the next call reconnects.
#include "results/store/internal/pg_pipeline.h"

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "results/store/internal/sql.h"
#include "results/store/testing/postgres_for_test.h"
#include "results/store/testing/test_database.h"

namespace densegate::results::internal {
namespace {

using ::testing::HasSubstr;

class PgPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::CreatePostgresForThisTest(&db_);
    if (db_ == nullptr) return;
    pipeline_ = std::make_unique<PgPipeline>(db_->url(), &hooks_);
  }

  // Waits (polling the server, no sleeping) until a session of this
  // database runs a statement containing `text`.
  void AwaitRunning(const std::string& text) {
    const std::string query = absl::StrCat(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '",
        db_->database_name(), "' AND state = 'active' AND query LIKE '%", text,
        "%' AND pid <> pg_backend_pid()");
    for (;;) {
      absl::StatusOr<int64_t> n = db_->QueryInt(query);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n > 0) return;
    }
  }

  std::unique_ptr<testing::TestDatabase> db_;
  DriverHooks hooks_;
  std::unique_ptr<PgPipeline> pipeline_;
};

TEST_F(PgPipelineTest, EachCallerGetsItsOwnResult) {
  constexpr int kThreads = 8, kCalls = 50;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        const int64_t x = t * 1000 + i;
        absl::StatusOr<SqlResult> r = pipeline_->Exec(
            "Add", "SELECT CAST($1 AS BIGINT) + 1, $2", {x, "tag"});
        if (!r.ok() || r->rows.size() != 1 || r->rows[0].Int(0) != x + 1 ||
            r->rows[0].Text(1) != "tag") {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST_F(PgPipelineTest, AnErrorStaysWithItsStatement) {
  absl::StatusOr<SqlResult> divide =
      pipeline_->Exec("Divide", "SELECT 1 / CAST($1 AS INTEGER)", {0});
  EXPECT_EQ(divide.status().code(), absl::StatusCode::kInvalidArgument)
      << divide.status();
  EXPECT_THAT(divide.status().message(), HasSubstr("Divide"));
  EXPECT_THAT(divide.status().message(), HasSubstr("22012"));
  // A statement that does not parse fails each time it is tried (it is
  // not left behind as prepared), and the one after it runs.
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<SqlResult> bad = pipeline_->Exec("Bad", "SELEC 1", {});
    EXPECT_FALSE(bad.ok());
    EXPECT_THAT(bad.status().message(), HasSubstr("42601"));
  }
  absl::StatusOr<SqlResult> fine =
      pipeline_->Exec("Fine", "SELECT CAST($1 AS INTEGER)", {7});
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->rows.at(0).Int(0), 7);
}

TEST_F(PgPipelineTest, WritesCommitAndCountAffectedRows) {
  ASSERT_TRUE(
      db_->Exec("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, who TEXT)").ok());
  absl::StatusOr<SqlResult> r =
      pipeline_->Exec("Insert", "INSERT INTO t (who) VALUES ($1), ($1)", {"x"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->affected, 2);
  // Autocommit: another session sees the rows at once.
  absl::StatusOr<int64_t> n = db_->QueryInt("SELECT count(*) FROM t");
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, 2);
}

TEST_F(PgPipelineTest, AStatementSentBehindARunningOneRunsAfterIt) {
  ASSERT_TRUE(
      db_->Exec("CREATE TABLE t (id BIGSERIAL PRIMARY KEY, who TEXT)").ok());
  std::thread slow([&] {
    absl::StatusOr<SqlResult> r =
        pipeline_->Exec("Slow",
                        "INSERT INTO t (who) SELECT $1 FROM "
                        "(SELECT pg_sleep(0.3)) AS pause",
                        {"slow"});
    EXPECT_TRUE(r.ok()) << r.status();
  });
  AwaitRunning("pg_sleep(0.3)");
  absl::StatusOr<SqlResult> fast =
      pipeline_->Exec("Fast", "INSERT INTO t (who) VALUES ($1)", {"fast"});
  slow.join();
  ASSERT_TRUE(fast.ok()) << fast.status();
  // The fast statement ran after the slow one on the one connection: its
  // row came second. (On a connection of its own it would have run during
  // the pause, and its row, numbered when inserted, would come first.)
  absl::StatusOr<std::vector<std::vector<std::string>>> rows =
      db_->Query("SELECT who FROM t ORDER BY id");
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  EXPECT_EQ((*rows)[0][0], "slow");
  EXPECT_EQ((*rows)[1][0], "fast");
}

TEST_F(PgPipelineTest, ALostConnectionFailsTheCallThenReconnects) {
  ASSERT_TRUE(pipeline_->Exec("Warm", "SELECT 1", {}).ok());
  absl::StatusOr<int> killed = db_->TerminateOtherSessions();
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_GE(*killed, 1);
  absl::StatusOr<SqlResult> lost = pipeline_->Exec("Lost", "SELECT 2", {});
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kUnavailable)
      << lost.status();
  EXPECT_THAT(lost.status().message(),
              HasSubstr("may or may not have taken effect"));
  absl::StatusOr<SqlResult> again = pipeline_->Exec("Again", "SELECT 3", {});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->rows.at(0).Int(0), 3);
}

TEST_F(PgPipelineTest, TheHookRunsBeforeEachStatement) {
  std::vector<std::string> ops;
  hooks_.before_statement = [&](absl::string_view op, int index) {
    ops.push_back(absl::StrCat(op, ":", index));
  };
  ASSERT_TRUE(pipeline_->Exec("One", "SELECT 1", {}).ok());
  ASSERT_TRUE(pipeline_->Exec("Two", "SELECT 2", {}).ok());
  EXPECT_THAT(ops, ::testing::ElementsAre("One:0", "Two:0"));
}

}  // namespace
}  // namespace densegate::results::internal
