#include "results/store/internal/pg_driver.h"

#include <exception>
#include <mutex>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace densegate::results::internal {
namespace {

// Distinct statement texts prepared per connection; beyond this, statements
// run unprepared (dynamic filters can produce many texts).
constexpr size_t kMaxPreparedPerConnection = 512;

struct PgConn {
  std::unique_ptr<pqxx::connection> conn;
  absl::flat_hash_map<std::string, std::string> prepared;
};

std::string Clean(absl::string_view what) {
  return std::string(absl::StripTrailingAsciiWhitespace(what));
}

bool IsConnectionSqlState(absl::string_view state) {
  return absl::StartsWith(state, "08") || state == "57P01" ||
         state == "57P02" || state == "57P03";
}

absl::Status LostConnection(absl::string_view op, absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      op, ": the connection to PostgreSQL was lost (", Clean(what),
      "); the transaction was rolled back, nothing was written. Retry: the "
      "store reconnects on the next call"));
}

// The same for a statement run in autocommit mode (TxMode::kSingleStatement):
// the server may have committed it before the connection went.
absl::Status LostConnectionInDoubt(absl::string_view op,
                                   absl::string_view what) {
  return absl::UnavailableError(absl::StrCat(
      op, ": the connection to PostgreSQL was lost (", Clean(what),
      ") while its single statement ran; it may or may not have taken "
      "effect (retrying is safe: a repeated call reports what already "
      "happened). The store reconnects on the next call"));
}

absl::Status FromSqlError(absl::string_view op, const pqxx::sql_error& e) {
  const std::string& state = e.sqlstate();
  std::string msg =
      absl::StrCat(op, ": PostgreSQL error ", state, ": ", Clean(e.what()));
  if (IsConnectionSqlState(state)) return LostConnection(op, e.what());
  if (state == "23505") return absl::AlreadyExistsError(msg);
  if (state == "23503" || state == "P0001") {
    return absl::FailedPreconditionError(msg);
  }
  if (absl::StartsWith(state, "23") || absl::StartsWith(state, "22")) {
    return absl::InvalidArgumentError(msg);
  }
  if (state == "40001" || state == "40P01") {
    return absl::AbortedError(absl::StrCat(msg, "; retry the call"));
  }
  if (absl::StartsWith(state, "53")) {
    return absl::UnavailableError(absl::StrCat(msg, "; retry later"));
  }
  return absl::InternalError(msg);
}

class PgTx : public SqlTx {
 public:
  PgTx(PgConn* conn, pqxx::transaction_base* work, absl::string_view op,
       const DriverHooks* hooks, bool autocommit)
      : conn_(conn),
        work_(work),
        op_(op),
        hooks_(hooks),
        autocommit_(autocommit) {}

  absl::StatusOr<SqlResult> Exec(absl::string_view sql,
                                 absl::Span<const SqlValue> params) override {
    if (hooks_->before_statement) hooks_->before_statement(op_, index_);
    ++index_;
    std::vector<std::string> storage(params.size());
    std::vector<const char*> pointers(params.size(), nullptr);
    for (size_t i = 0; i < params.size(); ++i) {
      const SqlValue& v = params[i];
      switch (v.kind()) {
        case SqlValue::Kind::kNull:
          continue;
        case SqlValue::Kind::kInt:
          storage[i] = absl::StrCat(v.int_value());
          break;
        case SqlValue::Kind::kDouble:
          storage[i] = DoubleToSqlText(v.double_value());
          break;
        case SqlValue::Kind::kText:
          if (v.text().find('\0') != std::string::npos) {
            return absl::InvalidArgumentError(absl::StrCat(
                op_,
                ": a text value contains a NUL byte, which PostgreSQL "
                "text cannot hold"));
          }
          storage[i] = v.text();
          break;
        case SqlValue::Kind::kBytes:
          storage[i] = absl::StrCat("\\x", HexEncode(v.text()));
          break;
      }
      pointers[i] = storage[i].c_str();
    }
    try {
      pqxx::result r;
      std::string key(sql);
      auto it = conn_->prepared.find(key);
      if (it != conn_->prepared.end()) {
        r = work_->exec_prepared(it->second,
                                 pqxx::prepare::make_dynamic_params(pointers));
      } else if (conn_->prepared.size() < kMaxPreparedPerConnection) {
        std::string name = absl::StrCat("dg", conn_->prepared.size());
        conn_->conn->prepare(name, key);
        conn_->prepared.emplace(key, name);
        r = work_->exec_prepared(name,
                                 pqxx::prepare::make_dynamic_params(pointers));
      } else {
        r = work_->exec_params(key,
                               pqxx::prepare::make_dynamic_params(pointers));
      }
      SqlResult out;
      out.affected = static_cast<int64_t>(r.affected_rows());
      out.rows.reserve(r.size());
      for (const pqxx::row& row : r) {
        std::vector<SqlValue> values;
        values.reserve(row.size());
        for (const pqxx::field& f : row) {
          if (f.is_null()) {
            values.emplace_back();
          } else {
            values.emplace_back(std::string(f.c_str(), f.size()));
          }
        }
        out.rows.emplace_back(std::move(values));
      }
      return out;
    } catch (const pqxx::broken_connection& e) {
      broken_ = true;
      return Lost(e.what());
    } catch (const pqxx::sql_error& e) {
      if (IsConnectionSqlState(e.sqlstate()) || !conn_->conn->is_open()) {
        broken_ = true;
        return Lost(e.what());
      }
      return FromSqlError(op_, e);
    } catch (const std::exception& e) {
      if (!conn_->conn->is_open()) {
        broken_ = true;
        return Lost(e.what());
      }
      return absl::InternalError(
          absl::StrCat(op_, ": libpqxx error: ", Clean(e.what())));
    }
  }

  absl::Status ExecScript(absl::string_view sql) override {
    ++index_;
    try {
      work_->exec(std::string(sql));
      return absl::OkStatus();
    } catch (const pqxx::broken_connection& e) {
      broken_ = true;
      return LostConnection(op_, e.what());
    } catch (const pqxx::sql_error& e) {
      if (IsConnectionSqlState(e.sqlstate())) broken_ = true;
      return FromSqlError(op_, e);
    } catch (const std::exception& e) {
      if (!conn_->conn->is_open()) broken_ = true;
      return absl::InternalError(
          absl::StrCat(op_, ": libpqxx error: ", Clean(e.what())));
    }
  }

  bool broken() const { return broken_; }

 private:
  absl::Status Lost(absl::string_view what) const {
    return autocommit_ ? LostConnectionInDoubt(op_, what)
                       : LostConnection(op_, what);
  }

  PgConn* conn_;
  pqxx::transaction_base* work_;
  absl::string_view op_;
  const DriverHooks* hooks_;
  const bool autocommit_;
  int index_ = 0;
  bool broken_ = false;
};

class PgDriver : public SqlDriver {
 public:
  PgDriver(std::string url, int max_idle, DriverHooks hooks)
      : url_(std::move(url)), max_idle_(max_idle), hooks_(std::move(hooks)) {}

  Dialect dialect() const override { return Dialect::kPostgres; }

  absl::StatusOr<std::unique_ptr<PgConn>> Connect(absl::string_view op) {
    try {
      auto c = std::make_unique<PgConn>();
      c->conn = std::make_unique<pqxx::connection>(url_);
      // The store's statements are short and keyed on indexes: plan each
      // once per connection. In the default mode PostgreSQL re-plans these
      // CTE statements on every execution, and planning then costs more
      // than running them. (Plans are rebuilt when ANALYZE changes table
      // statistics.)
      pqxx::nontransaction setup(*c->conn);
      setup.exec("SET plan_cache_mode = force_generic_plan");
      return c;
    } catch (const std::exception& e) {
      std::string what = Clean(e.what());
      std::string msg = absl::StrCat(op, ": cannot connect to PostgreSQL at ",
                                     RedactUrl(url_), ": ", what);
      if (absl::StrContains(what, "invalid URI") ||
          absl::StrContains(what, "invalid connection option") ||
          absl::StrContains(what, "missing \"=\"")) {
        return absl::InvalidArgumentError(msg);
      }
      return absl::UnavailableError(absl::StrCat(
          msg,
          ". Is the server running and reachable? The store retries on "
          "the next call"));
    }
  }

  absl::Status Transact(absl::string_view op, TxMode mode,
                        absl::FunctionRef<absl::Status(SqlTx&)> fn) override {
    std::unique_ptr<PgConn> conn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!idle_.empty()) {
        conn = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (conn == nullptr) {
      absl::StatusOr<std::unique_ptr<PgConn>> c = Connect(op);
      if (!c.ok()) return c.status();
      conn = *std::move(c);
    }
    absl::Status status;
    bool broken = false;
    try {
      if (mode == TxMode::kSingleStatement) {
        pqxx::nontransaction autocommit(*conn->conn);
        PgTx tx(conn.get(), &autocommit, op, &hooks_, /*autocommit=*/true);
        status = fn(tx);
        broken = tx.broken();
      } else {
        pqxx::work work(*conn->conn);
        PgTx tx(conn.get(), &work, op, &hooks_, /*autocommit=*/false);
        status = fn(tx);
        broken = tx.broken();
        if (status.ok()) {
          if (hooks_.before_commit) hooks_.before_commit(op);
          try {
            work.commit();
          } catch (const pqxx::in_doubt_error& e) {
            broken = true;
            status = absl::UnavailableError(absl::StrCat(
                op,
                ": the connection to PostgreSQL was lost while committing (",
                Clean(e.what()),
                "); the outcome is unknown: read the state back before "
                "retrying. The store reconnects on the next call"));
          }
        }
      }
    } catch (const pqxx::broken_connection& e) {
      broken = true;
      status = LostConnection(op, e.what());
    } catch (const pqxx::sql_error& e) {
      broken = broken || IsConnectionSqlState(e.sqlstate());
      status = FromSqlError(op, e);
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat(op, ": libpqxx error: ", Clean(e.what())));
    }
    if (!broken && !conn->conn->is_open()) {
      broken = true;
      if (status.ok() || status.code() == absl::StatusCode::kInternal) {
        status = LostConnection(op, "connection closed");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (broken) {
      // After a server restart every pooled connection is dead too.
      idle_.clear();
    } else if (static_cast<int>(idle_.size()) < max_idle_) {
      idle_.push_back(std::move(conn));
    }
    return status;
  }

  void AddIdle(std::unique_ptr<PgConn> conn) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(conn));
  }

 private:
  const std::string url_;
  const int max_idle_;
  const DriverHooks hooks_;
  // Guards idle_. std::mutex so that ThreadSanitizer sees it.
  std::mutex mu_;
  std::vector<std::unique_ptr<PgConn>> idle_;
};

}  // namespace

std::string RedactUrl(absl::string_view url) {
  std::string out(url);
  size_t scheme = out.find("://");
  if (scheme != std::string::npos) {
    size_t at = out.find('@', scheme + 3);
    size_t colon = out.find(':', scheme + 3);
    if (at != std::string::npos && colon != std::string::npos && colon < at) {
      out.replace(colon + 1, at - colon - 1, "***");
    }
  }
  size_t pw = out.find("password=");
  if (pw != std::string::npos) {
    size_t end = out.find_first_of(" &", pw);
    out.replace(pw + 9,
                end == std::string::npos ? std::string::npos : end - pw - 9,
                "***");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SqlDriver>> OpenPgDriver(
    absl::string_view url, int max_idle_connections, DriverHooks hooks) {
  auto driver = std::make_unique<PgDriver>(
      std::string(url), max_idle_connections < 1 ? 1 : max_idle_connections,
      std::move(hooks));
  absl::StatusOr<std::unique_ptr<PgConn>> first = driver->Connect("open");
  if (!first.ok()) return first.status();
  driver->AddIdle(*std::move(first));
  return std::unique_ptr<SqlDriver>(std::move(driver));
}

}  // namespace densegate::results::internal
