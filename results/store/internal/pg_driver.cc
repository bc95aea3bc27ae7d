#include "results/store/internal/pg_driver.h"

#include <exception>
#include <mutex>
#include <optional>
#include <pqxx/pqxx>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "results/store/internal/pg_common.h"
#include "results/store/internal/pg_pipeline.h"

namespace densegate::results::internal {
namespace {

// Distinct statement texts prepared per connection; beyond this, statements
// run unprepared (dynamic filters can produce many texts).
constexpr size_t kMaxPreparedPerConnection = 512;

struct PgConn {
  std::unique_ptr<pqxx::connection> conn;
  absl::flat_hash_map<std::string, std::string> prepared;
};

// A libpqxx error as a status.
absl::Status FromSqlError(absl::string_view op, const pqxx::sql_error& e) {
  return PgServerError(op, e.sqlstate(), e.what());
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
    absl::StatusOr<std::vector<std::optional<std::string>>> texts =
        PgParamTexts(op_, params);
    if (!texts.ok()) return texts.status();
    const std::vector<const char*> pointers = PgParamPointers(*texts);
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
      if (IsPgConnectionState(e.sqlstate()) || !conn_->conn->is_open()) {
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
          absl::StrCat(op_, ": libpqxx error: ", PgClean(e.what())));
    }
  }

  absl::Status ExecScript(absl::string_view sql) override {
    ++index_;
    try {
      work_->exec(std::string(sql));
      return absl::OkStatus();
    } catch (const pqxx::broken_connection& e) {
      broken_ = true;
      return PgLostConnection(op_, e.what());
    } catch (const pqxx::sql_error& e) {
      if (IsPgConnectionState(e.sqlstate())) broken_ = true;
      return FromSqlError(op_, e);
    } catch (const std::exception& e) {
      if (!conn_->conn->is_open()) broken_ = true;
      return absl::InternalError(
          absl::StrCat(op_, ": libpqxx error: ", PgClean(e.what())));
    }
  }

  bool broken() const { return broken_; }

 private:
  absl::Status Lost(absl::string_view what) const {
    return autocommit_ ? PgLostConnectionInDoubt(op_, what)
                       : PgLostConnection(op_, what);
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
      : url_(std::move(url)),
        max_idle_(max_idle),
        hooks_(std::move(hooks)),
        pipeline_(url_, &hooks_) {}

  Dialect dialect() const override { return Dialect::kPostgres; }

  absl::StatusOr<std::unique_ptr<PgConn>> Connect(absl::string_view op) {
    try {
      auto c = std::make_unique<PgConn>();
      c->conn = std::make_unique<pqxx::connection>(url_);
      pqxx::nontransaction setup(*c->conn);
      setup.exec(kPgSessionSetup);
      return c;
    } catch (const std::exception& e) {
      return PgConnectError(op, url_, e.what());
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
                PgClean(e.what()),
                "); the outcome is unknown: read the state back before "
                "retrying. The store reconnects on the next call"));
          }
        }
      }
    } catch (const pqxx::broken_connection& e) {
      broken = true;
      status = PgLostConnection(op, e.what());
    } catch (const pqxx::sql_error& e) {
      broken = broken || IsPgConnectionState(e.sqlstate());
      status = FromSqlError(op, e);
    } catch (const std::exception& e) {
      status = absl::InternalError(
          absl::StrCat(op, ": libpqxx error: ", PgClean(e.what())));
    }
    if (!broken && !conn->conn->is_open()) {
      broken = true;
      if (status.ok() || status.code() == absl::StatusCode::kInternal) {
        status = PgLostConnection(op, "connection closed");
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (broken) {
      // After a server restart every pooled connection is dead too, and so
      // is the pipelined one.
      idle_.clear();
      pipeline_.DropIdleConnection();
    } else if (static_cast<int>(idle_.size()) < max_idle_) {
      idle_.push_back(std::move(conn));
    }
    return status;
  }

  absl::StatusOr<SqlResult> ExecPipelined(
      absl::string_view op, absl::string_view sql,
      absl::Span<const SqlValue> params) override {
    absl::StatusOr<SqlResult> r = pipeline_.Exec(op, sql, params);
    if (absl::IsUnavailable(r.status())) {
      // After a server restart every pooled connection is dead too.
      std::lock_guard<std::mutex> lock(mu_);
      idle_.clear();
    }
    return r;
  }

  void AddIdle(std::unique_ptr<PgConn> conn) {
    std::lock_guard<std::mutex> lock(mu_);
    idle_.push_back(std::move(conn));
  }

 private:
  const std::string url_;
  const int max_idle_;
  const DriverHooks hooks_;
  PgPipeline pipeline_;
  // Guards idle_. std::mutex so that ThreadSanitizer sees it.
  std::mutex mu_;
  std::vector<std::unique_ptr<PgConn>> idle_;
};

}  // namespace

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
