#include "results/store/testing/postgres_for_test.h"

#include <cstdlib>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "gtest/gtest.h"

namespace densegate::results::testing {
namespace {

// CI=true (or 1, yes): a missing server is a failure, not a skip.
bool RunningInCi() {
  const char* v = std::getenv("CI");
  if (v == nullptr) return false;
  const std::string s = absl::AsciiStrToLower(v);
  return s == "true" || s == "1" || s == "yes";
}

constexpr char kHowToRun[] =
    "PostgreSQL tests need a server: run "
    "`eval \"$(tools/pg_cluster.sh start)\"` (a throwaway cluster on "
    "loopback), then run the tests again; stop it with "
    "`tools/pg_cluster.sh stop`. tools/test.sh does all of this.";

}  // namespace

void CreatePostgresForThisTest(std::unique_ptr<TestDatabase>* db) {
  db->reset();
  const std::string url = PostgresUrlFromEnv();
  if (url.empty()) {
    if (RunningInCi()) {
      FAIL() << "CI=true but DENSEGATE_PG_URL is not set, so the PostgreSQL "
                "tests cannot run. "
             << kHowToRun;
    }
    GTEST_SKIP() << kHowToRun;
  }
  absl::StatusOr<std::unique_ptr<TestDatabase>> made =
      TestDatabase::CreatePostgres(
          url, ::testing::UnitTest::GetInstance()->current_test_info()->name());
  ASSERT_TRUE(made.ok()) << made.status();
  *db = *std::move(made);
}

}  // namespace densegate::results::testing
