// Databases for store tests: a SQLite file under TEST_TMPDIR, or a fresh
// PostgreSQL database (CREATE DATABASE with a unique name, dropped at the
// end) on the server named by DENSEGATE_PG_URL. PostgreSQL databases are
// copies of a template migrated once per cluster and schema (so they start
// at the latest schema); SQLite files start empty. Plus raw SQL access that
// bypasses the store, to check what the database itself enforces.
//
// Test-only.
#ifndef DENSEGATE_RESULTS_STORE_TESTING_TEST_DATABASE_H_
#define DENSEGATE_RESULTS_STORE_TESTING_TEST_DATABASE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "results/store/internal/sql.h"

namespace densegate::results::testing {

// DENSEGATE_PG_URL, or "" when unset. Tests get their database through
// CreatePostgresForThisTest (postgres_for_test.h), which also decides
// between skipping and failing.
std::string PostgresUrlFromEnv();

class TestDatabase {
 public:
  // `name` is a hint for the file or database name (any characters).
  static absl::StatusOr<std::unique_ptr<TestDatabase>> CreateSqlite(
      absl::string_view name);
  static absl::StatusOr<std::unique_ptr<TestDatabase>> CreatePostgres(
      absl::string_view base_url, absl::string_view name);
  ~TestDatabase();

  bool is_postgres() const { return !base_url_.empty(); }
  // A URL OpenStore() accepts.
  const std::string& url() const { return url_; }
  const std::string& database_name() const { return db_name_; }

  // Runs SQL outside the store, in its own transaction.
  absl::Status Exec(absl::string_view sql);
  // Rows of a query, every value as text.
  absl::StatusOr<std::vector<std::vector<std::string>>> Query(
      absl::string_view sql);
  // One integer, e.g. SELECT count(*) ...
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);

  // CPU seconds (user and system) used so far by the PostgreSQL backends
  // now connected to this database, read from /proc: for benchmarks that
  // report the server's share. 0 for SQLite, or when the server runs
  // elsewhere (its processes are not in this machine's /proc). A backend
  // that has exited is no longer counted: read it while the connections
  // that did the work are open.
  double BackendCpuSeconds();

  // PostgreSQL only: terminates every other session connected to this
  // database (the stores' connections) and waits until they are gone.
  // Returns how many were terminated.
  absl::StatusOr<int> TerminateOtherSessions();

 private:
  TestDatabase() = default;
  std::string url_;
  std::string base_url_;  // PostgreSQL: the server URL the database was made on
  std::string db_name_;
  std::string sqlite_path_;  // SQLite: the file, deleted at the end
  std::unique_ptr<internal::SqlDriver> raw_;
};

// `url` (a libpq URI or keyword/value string) with its database replaced.
std::string WithDatabase(absl::string_view url, absl::string_view database);

}  // namespace densegate::results::testing

#endif  // DENSEGATE_RESULTS_STORE_TESTING_TEST_DATABASE_H_
