// OpenStore's URLs, the SQLite file, the migration runner and the SQL
// layer's conversions. No server needed.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/densegate.pb.h"
#include "results/store/internal/pg_common.h"
#include "results/store/internal/schema.h"
#include "results/store/internal/sql.h"
#include "results/store/internal/sqlite_driver.h"
#include "results/store/store.h"
#include "results/store/testing/status_assertions.h"
#include "results/store/testing/test_database.h"
#include "testing/test_util.h"

namespace densegate::results {
namespace {

using test::TestTmpDir;

using ::testing::HasSubstr;

std::string TmpPath(absl::string_view name) {
  return absl::StrCat(TestTmpDir(), "/", name);
}

SubmitParams Params(absl::string_view id) {
  SubmitParams p;
  v1::Candidate& c = p.candidate;
  c.set_id(std::string(id));
  c.set_repo("r");
  c.set_baseline_sha("b");
  c.set_candidate_sha("c");
  c.set_kind(v1::EXPERIMENT);
  c.set_submitter("agent");
  return p;
}

TEST(OpenStoreTest, AcceptsEverySqliteSpelling) {
  for (const std::string& url :
       {absl::StrCat("sqlite:", TmpPath("a.db")),
        absl::StrCat("sqlite://", TmpPath("b.db")), TmpPath("c.db"),
        std::string("sqlite::memory:")}) {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
    EXPECT_EQ(store->backend(), "sqlite") << url;
    ASSERT_OK(store->Submit(Params("x")).status());
  }
}

TEST(OpenStoreTest, RejectsBadUrls) {
  for (const char* url : {"", "mysql://db/x", "sqlite:", "sqlite://"}) {
    absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(url);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
  absl::StatusOr<std::unique_ptr<Store>> missing_dir =
      OpenStore("sqlite:/nonexistent-densegate-dir/x.db");
  EXPECT_EQ(missing_dir.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(missing_dir.status().message(),
              HasSubstr("nonexistent-densegate-dir"));
}

TEST(OpenStoreTest, UnreachablePostgresIsUnavailable) {
  // Port 1 on loopback: connection refused at once.
  absl::StatusOr<std::unique_ptr<Store>> s = OpenStore(
      "postgresql://densegate:secret@127.0.0.1:1/x?connect_timeout=2");
  EXPECT_EQ(s.status().code(), absl::StatusCode::kUnavailable) << s.status();
  EXPECT_THAT(s.status().message(), HasSubstr("cannot connect to PostgreSQL"));
  EXPECT_THAT(s.status().message(), ::testing::Not(HasSubstr("secret")));
}

TEST(SqliteStoreTest, FileIsWalAndSurvivesReopening) {
  const std::string url = absl::StrCat("sqlite:", TmpPath("reopen.db"));
  std::string id;
  {
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
    ASSERT_OK_AND_ASSIGN(SubmitResult r, store->Submit(Params("persist")));
    id = r.evaluation.id();
  }
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Store> store, OpenStore(url));
  ASSERT_OK_AND_ASSIGN(v1::Evaluation e, store->GetEvaluation(id));
  EXPECT_EQ(e.candidate().id(), "persist");

  ASSERT_OK_AND_ASSIGN(auto raw, internal::OpenSqliteDriver(
                                     TmpPath("reopen.db"), absl::Seconds(1)));
  // The driver's settings (sqlite_driver.cc says why): WAL, 1 KiB pages in
  // a file it created, a checkpoint every 4,000 WAL pages.
  auto pragma = [&](const std::string& name) {
    std::string value;
    EXPECT_OK(raw->Transact("t", internal::TxMode::kRead,
                            [&](internal::SqlTx& tx) -> absl::Status {
                              absl::StatusOr<internal::SqlResult> r =
                                  tx.Exec(absl::StrCat("PRAGMA ", name));
                              if (!r.ok()) return r.status();
                              value = r->rows.at(0).Text(0);
                              return absl::OkStatus();
                            }));
    return value;
  };
  EXPECT_EQ(pragma("journal_mode"), "wal");
  EXPECT_EQ(pragma("page_size"), "1024");
  EXPECT_EQ(pragma("wal_autocheckpoint"), "4000");
}

// Writers that arrive while a transaction runs are committed with the next
// one (group commit); each must still commit or fail alone.
TEST(SqliteStoreTest,
     ConcurrentWritesCommitTogetherYetEachAloneSucceedsOrFails) {
  ASSERT_OK_AND_ASSIGN(auto db, internal::OpenSqliteDriver(TmpPath("group.db"),
                                                           absl::Seconds(5)));
  ASSERT_OK(
      db->Transact("create", internal::TxMode::kWrite, [](internal::SqlTx& tx) {
        return tx.ExecScript("CREATE TABLE t (id INTEGER PRIMARY KEY)");
      }));
  constexpr int kWriters = 16;
  std::atomic<bool> first_inside{false};
  std::atomic<int> started{0};
  std::vector<absl::Status> statuses(kWriters);
  auto write = [&](int i) {
    return db->Transact("insert", internal::TxMode::kWrite,
                        [&](internal::SqlTx& tx) -> absl::Status {
                          // The first holds its transaction until every other
                          // writer is on its way, so that they queue behind it
                          // and commit as a group. It inserts id 0 before any
                          // other writer runs, so the duplicates are theirs.
                          if (i == 0) first_inside.store(true);
                          while (i == 0 && started.load() < kWriters - 1) {
                            std::this_thread::yield();
                          }
                          absl::StatusOr<internal::SqlResult> r =
                              tx.Exec("INSERT INTO t (id) VALUES ($1)",
                                      {i % 8 == 5 ? 0 : i});
                          if (!r.ok()) return r.status();  // A duplicate key.
                          if (i % 8 == 3)
                            return absl::AbortedError("changed its mind");
                          return absl::OkStatus();
                        });
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < kWriters; ++i) {
    threads.emplace_back([&, i] {
      if (i > 0) {
        while (!first_inside.load()) std::this_thread::yield();
        started.fetch_add(1);
      }
      statuses[i] = write(i);
    });
  }
  for (std::thread& t : threads) t.join();

  std::set<int64_t> expected;
  for (int i = 0; i < kWriters; ++i) {
    SCOPED_TRACE(i);
    if (i % 8 == 3) {
      EXPECT_EQ(statuses[i].code(), absl::StatusCode::kAborted);
    } else if (i % 8 == 5) {
      EXPECT_EQ(statuses[i].code(), absl::StatusCode::kAlreadyExists);
    } else {
      EXPECT_TRUE(statuses[i].ok()) << statuses[i];
      expected.insert(i);
    }
  }
  std::set<int64_t> ids;
  ASSERT_OK(db->Transact("read", internal::TxMode::kRead,
                         [&](internal::SqlTx& tx) -> absl::Status {
                           absl::StatusOr<internal::SqlResult> r =
                               tx.Exec("SELECT id FROM t");
                           if (!r.ok()) return r.status();
                           for (const internal::SqlRow& row : r->rows) {
                             ids.insert(row.Int(0));
                           }
                           return absl::OkStatus();
                         }));
  EXPECT_EQ(ids, expected);
}

TEST(SqliteStoreTest, OpeningAnOldSchemaWithoutMigratingSaysHowToMigrate) {
  StoreOptions options;
  options.migrate = false;
  absl::StatusOr<std::unique_ptr<Store>> s =
      OpenStore(absl::StrCat("sqlite:", TmpPath("empty.db")), options);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr("densegate db migrate"));
  // Migrate() is the entry point the CLI calls.
  options.migrate = true;
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<Store> store,
      OpenStore(absl::StrCat("sqlite:", TmpPath("empty.db")), options));
  options.migrate = false;
  ASSERT_OK(OpenStore(absl::StrCat("sqlite:", TmpPath("empty.db")), options)
                .status());
}

std::string V2(internal::Dialect) {
  return "CREATE TABLE annotations (id INTEGER PRIMARY KEY, note TEXT NOT "
         "NULL);";
}
std::string Broken(internal::Dialect) {
  return "CREATE TABLE repos (id INTEGER);";
}

TEST(MigrationsTest, ApplyInOrderOnceAndRefuseNewerDatabases) {
  ASSERT_OK_AND_ASSIGN(
      auto driver,
      internal::OpenSqliteDriver(TmpPath("migrate.db"), absl::Seconds(1)));
  const internal::Migration v1_only[] = {internal::AllMigrations()[0]};
  ASSERT_OK(internal::ApplyMigrations(*driver, v1_only, 1));
  ASSERT_OK_AND_ASSIGN(int v, internal::CurrentSchemaVersion(*driver));
  EXPECT_EQ(v, 1);

  const internal::Migration two[] = {internal::AllMigrations()[0],
                                     {2, "annotations", &V2}};
  ASSERT_OK(internal::ApplyMigrations(*driver, two, 2));
  ASSERT_OK(internal::ApplyMigrations(*driver, two, 3));  // nothing left to do
  ASSERT_OK_AND_ASSIGN(v, internal::CurrentSchemaVersion(*driver));
  EXPECT_EQ(v, 2);

  absl::Status newer = internal::ApplyMigrations(*driver, v1_only, 4);
  EXPECT_EQ(newer.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(newer.message(), HasSubstr("newer"));

  // A failing migration is rolled back whole and names itself.
  const internal::Migration bad[] = {two[0], two[1], {3, "broken", &Broken}};
  absl::Status failed = internal::ApplyMigrations(*driver, bad, 5);
  EXPECT_FALSE(failed.ok());
  EXPECT_THAT(failed.message(), HasSubstr("migration 3 (broken)"));
  ASSERT_OK_AND_ASSIGN(v, internal::CurrentSchemaVersion(*driver));
  EXPECT_EQ(v, 2);
}

TEST(SqlLayerTest, DoublesRoundTripThroughText) {
  for (double d : {0.1, 1.0 / 3.0, 1e-300, -2.5e17, 123456789.123456789}) {
    internal::SqlRow row({internal::SqlValue(internal::DoubleToSqlText(d))});
    EXPECT_EQ(row.Double(0), d);
  }
  internal::SqlRow special({internal::SqlValue("NaN"),
                            internal::SqlValue("Infinity"),
                            internal::SqlValue("-Infinity")});
  EXPECT_TRUE(std::isnan(special.Double(0)));
  EXPECT_EQ(special.Double(1), std::numeric_limits<double>::infinity());
  EXPECT_EQ(special.Double(2), -std::numeric_limits<double>::infinity());
}

TEST(SqlLayerTest, ByteaHexDecodes) {
  const std::string bytes("\x00\x01\xfe\xff", 4);
  internal::SqlRow row(
      {internal::SqlValue(absl::StrCat("\\x", internal::HexEncode(bytes)))});
  EXPECT_EQ(row.Bytes(0), bytes);
  EXPECT_EQ(internal::HexEncode(bytes), "0001feff");
}

TEST(SqlLayerTest, UrlsAreRedactedAndRetargeted) {
  EXPECT_EQ(internal::RedactUrl("postgresql://u:pw@h:5/db"),
            "postgresql://u:***@h:5/db");
  EXPECT_EQ(internal::RedactUrl("host=h password=pw dbname=x"),
            "host=h password=*** dbname=x");
  EXPECT_EQ(internal::RedactUrl("postgresql://u@h/db"), "postgresql://u@h/db");
  EXPECT_EQ(testing::WithDatabase("postgresql://u@h:5/postgres", "t1"),
            "postgresql://u@h:5/t1");
  EXPECT_EQ(testing::WithDatabase("postgresql://u@h:5", "t1"),
            "postgresql://u@h:5/t1");
  EXPECT_EQ(testing::WithDatabase("postgresql://u@h:5/p?sslmode=disable", "t1"),
            "postgresql://u@h:5/t1?sslmode=disable");
  EXPECT_EQ(testing::WithDatabase("host=h", "t1"), "host=h dbname=t1");
}

}  // namespace
}  // namespace densegate::results
