#include "results/store/testing/test_database.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <mutex>
#include <pqxx/pqxx>
#include <string>

#include "absl/random/random.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "results/store/internal/pg_common.h"
#include "results/store/internal/pg_driver.h"
#include "results/store/internal/schema.h"
#include "results/store/internal/sqlite_driver.h"

namespace densegate::results::testing {
namespace {

std::string Sanitize(absl::string_view name, size_t max) {
  std::string out;
  for (char c : name) {
    if (out.size() >= max) break;
    out.push_back(absl::ascii_isalnum(c) ? absl::ascii_tolower(c) : '_');
  }
  return out;
}

std::string RandomSuffix() {
  absl::BitGen gen;
  return absl::StrFormat("%08x", absl::Uniform<uint32_t>(gen));
}

}  // namespace

std::string PostgresUrlFromEnv() {
  const char* v = std::getenv("DENSEGATE_PG_URL");
  return v == nullptr ? "" : v;
}

std::string WithDatabase(absl::string_view url, absl::string_view database) {
  size_t scheme = url.find("://");
  if (scheme == absl::string_view::npos) {
    return absl::StrCat(url, " dbname=", database);
  }
  size_t slash = url.find('/', scheme + 3);
  size_t query = url.find('?', scheme + 3);
  if (slash == absl::string_view::npos ||
      (query != absl::string_view::npos && query < slash)) {
    // No path: insert one before the query, if any.
    if (query == absl::string_view::npos)
      return absl::StrCat(url, "/", database);
    return absl::StrCat(url.substr(0, query), "/", database, url.substr(query));
  }
  std::string out = absl::StrCat(url.substr(0, slash + 1), database);
  if (query != absl::string_view::npos)
    absl::StrAppend(&out, url.substr(query));
  return out;
}

absl::StatusOr<std::unique_ptr<TestDatabase>> TestDatabase::CreateSqlite(
    absl::string_view name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = tmp != nullptr ? tmp : "/tmp";
  auto db = std::unique_ptr<TestDatabase>(new TestDatabase());
  db->db_name_ = absl::StrCat(Sanitize(name, 80), "_", RandomSuffix(), ".db");
  std::string path = absl::StrCat(dir, "/", db->db_name_);
  db->url_ = absl::StrCat("sqlite:", path);
  db->sqlite_path_ = path;
  absl::StatusOr<std::unique_ptr<internal::SqlDriver>> raw =
      internal::OpenSqliteDriver(path, absl::Seconds(10));
  if (!raw.ok()) return raw.status();
  db->raw_ = *std::move(raw);
  return db;
}

namespace {

// Test databases are copies of a migrated template, which is faster than
// migrating each one. The template is named after a hash of the schema, so
// it is made once per cluster and schema and shared by test processes; it
// stays until the (throwaway) cluster goes. Made under an advisory lock and
// published by renaming, so no process copies a half-migrated one.
uint64_t Fnv1a(absl::string_view s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

std::string TemplateName() {
  std::string schema;
  for (const internal::Migration& m : internal::AllMigrations()) {
    absl::StrAppend(&schema, m.version, m.sql(internal::Dialect::kPostgres));
  }
  return absl::StrFormat("dgt_template_%016x", Fnv1a(schema));
}

absl::StatusOr<std::string> EnsureTemplate(const std::string& base_url) {
  static std::mutex mu;
  static std::string* ready = nullptr;  // Guarded by mu.
  std::lock_guard<std::mutex> lock(mu);
  const std::string name = TemplateName();
  if (ready != nullptr && *ready == base_url) return name;
  try {
    pqxx::connection admin(base_url);
    pqxx::nontransaction tx(admin);
    tx.exec("SELECT pg_advisory_lock(7420514470002)");
    bool exists =
        !tx.exec(absl::StrCat("SELECT 1 FROM pg_database WHERE datname = '",
                              name, "'"))
             .empty();
    if (!exists) {
      const std::string building =
          absl::StrCat("dgt_building_", RandomSuffix());
      tx.exec(absl::StrCat("CREATE DATABASE ", building));
      absl::Status migrated;
      {
        absl::StatusOr<std::unique_ptr<internal::SqlDriver>> driver =
            internal::OpenPgDriver(WithDatabase(base_url, building), 1);
        migrated = driver.ok() ? internal::ApplyMigrations(
                                     **driver, internal::AllMigrations(),
                                     absl::ToUnixMicros(absl::Now()))
                               : driver.status();
      }
      if (!migrated.ok()) {
        tx.exec(absl::StrCat("DROP DATABASE IF EXISTS ", building,
                             " WITH (FORCE)"));
        tx.exec("SELECT pg_advisory_unlock(7420514470002)");
        return migrated;
      }
      tx.exec(absl::StrCat("ALTER DATABASE ", building, " RENAME TO ", name));
    }
    tx.exec("SELECT pg_advisory_unlock(7420514470002)");
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot prepare template database ", name, " on ",
                     internal::RedactUrl(base_url), ": ", e.what()));
  }
  if (ready == nullptr) ready = new std::string();
  *ready = base_url;
  return name;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TestDatabase>> TestDatabase::CreatePostgres(
    absl::string_view base_url, absl::string_view name) {
  auto db = std::unique_ptr<TestDatabase>(new TestDatabase());
  db->base_url_ = std::string(base_url);
  db->db_name_ = absl::StrCat("dgt_", Sanitize(name, 40), "_", RandomSuffix());
  absl::StatusOr<std::string> tmpl = EnsureTemplate(db->base_url_);
  if (!tmpl.ok()) return tmpl.status();
  try {
    pqxx::connection admin(db->base_url_);
    pqxx::nontransaction tx(admin);
    tx.exec(absl::StrCat("CREATE DATABASE ", db->db_name_, " TEMPLATE ", *tmpl,
                         " STRATEGY FILE_COPY"));
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot create test database ", db->db_name_, " on ",
                     internal::RedactUrl(base_url), ": ", e.what()));
  }
  db->url_ = WithDatabase(base_url, db->db_name_);
  absl::StatusOr<std::unique_ptr<internal::SqlDriver>> raw =
      internal::OpenPgDriver(db->url_, 1);
  if (!raw.ok()) return raw.status();
  db->raw_ = *std::move(raw);
  return db;
}

TestDatabase::~TestDatabase() {
  raw_.reset();
  if (base_url_.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::remove(absl::StrCat(sqlite_path_, suffix).c_str());
    }
    return;
  }
  try {
    pqxx::connection admin(base_url_);
    pqxx::nontransaction tx(admin);
    tx.exec(
        absl::StrCat("DROP DATABASE IF EXISTS ", db_name_, " WITH (FORCE)"));
  } catch (const std::exception&) {
    // Best effort: the cluster is throwaway.
  }
}

absl::Status TestDatabase::Exec(absl::string_view sql) {
  return raw_->Transact(
      "raw", internal::TxMode::kWrite,
      [&](internal::SqlTx& tx) { return tx.ExecScript(sql); });
}

absl::StatusOr<std::vector<std::vector<std::string>>> TestDatabase::Query(
    absl::string_view sql) {
  std::vector<std::vector<std::string>> out;
  absl::Status status =
      raw_->Transact("raw", internal::TxMode::kWrite,
                     [&](internal::SqlTx& tx) -> absl::Status {
                       absl::StatusOr<internal::SqlResult> r = tx.Exec(sql);
                       if (!r.ok()) return r.status();
                       for (const internal::SqlRow& row : r->rows) {
                         std::vector<std::string> values;
                         for (size_t i = 0; i < row.size(); ++i) {
                           values.push_back(row.Text(static_cast<int>(i)));
                         }
                         out.push_back(std::move(values));
                       }
                       return absl::OkStatus();
                     });
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<int64_t> TestDatabase::QueryInt(absl::string_view sql) {
  absl::StatusOr<std::vector<std::vector<std::string>>> rows = Query(sql);
  if (!rows.ok()) return rows.status();
  if (rows->size() != 1 || rows->at(0).size() != 1) {
    return absl::InternalError(absl::StrCat("expected one value from: ", sql));
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(rows->at(0).at(0), &v)) {
    return absl::InternalError(
        absl::StrCat("not an integer: ", rows->at(0).at(0)));
  }
  return v;
}

double TestDatabase::BackendCpuSeconds() {
  if (!is_postgres()) return 0;
  absl::StatusOr<std::vector<std::vector<std::string>>> pids = Query(
      "SELECT pid FROM pg_stat_activity WHERE datname = current_database()");
  if (!pids.ok()) return 0;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  double total = 0;
  for (const std::vector<std::string>& row : *pids) {
    std::ifstream stat(absl::StrCat("/proc/", row.at(0), "/stat"));
    const std::string content((std::istreambuf_iterator<char>(stat)),
                              std::istreambuf_iterator<char>());
    // The command (field 2) is in parentheses and may hold spaces.
    const size_t close = content.rfind(')');
    if (close == std::string::npos || close + 2 > content.size()) continue;
    const std::vector<std::string> fields =
        absl::StrSplit(content.substr(close + 2), ' ');
    // After the command: state is [0]; utime and stime are [11] and [12].
    double utime = 0;
    double stime = 0;
    if (fields.size() < 13 || !absl::SimpleAtod(fields[11], &utime) ||
        !absl::SimpleAtod(fields[12], &stime)) {
      continue;
    }
    total += (utime + stime) / tick;
  }
  return total;
}

absl::StatusOr<int> TestDatabase::TerminateOtherSessions() {
  if (!is_postgres()) {
    return absl::FailedPreconditionError(
        "only PostgreSQL has sessions to terminate");
  }
  // pg_terminate_backend(pid, timeout) waits until the backend is gone.
  absl::StatusOr<std::vector<std::vector<std::string>>> rows = Query(
      "SELECT pid, pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
      "WHERE datname = current_database() AND pid <> pg_backend_pid() AND "
      "backend_type = 'client backend'");
  if (!rows.ok()) return rows.status();
  for (const auto& row : *rows) {
    if (row.at(1) != "t") {
      return absl::InternalError(
          absl::StrCat("backend ", row.at(0), " did not terminate"));
    }
  }
  return static_cast<int>(rows->size());
}

}  // namespace densegate::results::testing
