#include "results/store/internal/sqlite_driver.h"

#include <sqlite3.h>

#include <condition_variable>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace densegate::results::internal {
namespace {

// A prepared statement and, for each of its SQLite parameter slots, which
// of our $N parameters (0-based) goes there.
struct Prepared {
  sqlite3_stmt* stmt = nullptr;
  std::vector<int> slot_to_param;
};

absl::Status SqliteError(sqlite3* db, int rc, absl::string_view op,
                         absl::string_view what) {
  int ext = db != nullptr ? sqlite3_extended_errcode(db) : rc;
  std::string msg = absl::StrCat(
      op, ": SQLite ", what,
      " failed: ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
      " (code ", ext, ")");
  switch (ext) {
    case SQLITE_CONSTRAINT_UNIQUE:
    case SQLITE_CONSTRAINT_PRIMARYKEY:
      return absl::AlreadyExistsError(msg);
    case SQLITE_CONSTRAINT_TRIGGER:
    case SQLITE_CONSTRAINT_FOREIGNKEY:
      return absl::FailedPreconditionError(msg);
    default:
      break;
  }
  switch (ext & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(absl::StrCat(
          msg,
          "; the database file stayed locked by another writer past the "
          "busy timeout: retry"));
    case SQLITE_CONSTRAINT:
      return absl::InvalidArgumentError(msg);
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
      return absl::UnavailableError(msg);
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    default:
      return absl::InternalError(msg);
  }
}

class SqliteDriver;

class SqliteTx : public SqlTx {
 public:
  SqliteTx(SqliteDriver* driver, absl::string_view op)
      : driver_(driver), op_(op) {}
  absl::StatusOr<SqlResult> Exec(absl::string_view sql,
                                 absl::Span<const SqlValue> params) override;
  absl::Status ExecScript(absl::string_view sql) override;

 private:
  SqliteDriver* driver_;
  absl::string_view op_;
  int index_ = 0;
};

class SqliteDriver : public SqlDriver {
 public:
  SqliteDriver(sqlite3* db, DriverHooks hooks)
      : db_(db), hooks_(std::move(hooks)) {}
  ~SqliteDriver() override {
    for (auto& [sql, p] : cache_) sqlite3_finalize(p.stmt);
    sqlite3_close_v2(db_);
  }

  Dialect dialect() const override { return Dialect::kSqlite; }

  absl::Status Transact(absl::string_view op, TxMode mode,
                        absl::FunctionRef<absl::Status(SqlTx&)> fn) override {
    if (mode == TxMode::kRead) {
      std::lock_guard<std::mutex> lock(mu_);
      return RunAlone(op, "BEGIN", fn);
    }
    // Group commit: writers that arrive while a batch runs wait for it; the
    // first of them then runs them all in one transaction, each inside its
    // own savepoint, so that each still commits or fails on its own while
    // the batch pays for one BEGIN, one COMMIT and one WAL append.
    Pending me{op, fn};
    std::unique_lock<std::mutex> queue(batch_mu_);
    pending_.push_back(&me);
    batch_cv_.wait(queue, [&] { return me.done || !leading_; });
    if (me.done) return me.status;
    leading_ = true;
    std::vector<Pending*> batch;
    batch.swap(pending_);
    queue.unlock();
    {
      std::lock_guard<std::mutex> lock(mu_);
      RunBatch(batch);
    }
    queue.lock();
    for (Pending* p : batch) p->done = true;
    leading_ = false;
    batch_cv_.notify_all();
    return me.status;
  }

 private:
  friend class SqliteTx;

  // A write transaction waiting for its batch.
  struct Pending {
    absl::string_view op;
    absl::FunctionRef<absl::Status(SqlTx&)> fn;
    absl::Status status;
    bool done = false;
  };

  // One transaction for `fn` alone.
  absl::Status RunAlone(absl::string_view op, const char* begin,
                        absl::FunctionRef<absl::Status(SqlTx&)> fn) {
    int rc = sqlite3_exec(db_, begin, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return SqliteError(db_, rc, op, "BEGIN");
    SqliteTx tx(this, op);
    absl::Status status = fn(tx);
    if (status.ok()) {
      if (hooks_.before_commit) hooks_.before_commit(op);
      rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
      if (rc == SQLITE_OK) return absl::OkStatus();
      status = SqliteError(db_, rc, op, "COMMIT");
    }
    if (!sqlite3_get_autocommit(db_)) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    }
    return status;
  }

  // Runs every transaction of `batch` and sets its status. Statement errors
  // roll back to the transaction's savepoint; an error that ends the whole
  // transaction (SQLite rolls back on some, e.g. a full disk) fails the
  // batch's earlier members too, and the rest run in a new transaction.
  void RunBatch(const std::vector<Pending*>& batch) {
    if (batch.size() == 1) {
      batch[0]->status =
          RunAlone(batch[0]->op, "BEGIN IMMEDIATE", batch[0]->fn);
      return;
    }
    auto exec = [&](const char* sql) {
      return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
    };
    std::vector<Pending*> applied;  // In the open transaction, to commit.
    bool open = false;
    for (Pending* p : batch) {
      if (!open) {
        if (int rc = exec("BEGIN IMMEDIATE"); rc != SQLITE_OK) {
          p->status = SqliteError(db_, rc, p->op, "BEGIN");
          continue;
        }
        open = true;
      }
      if (int rc = exec("SAVEPOINT batched"); rc != SQLITE_OK) {
        p->status = SqliteError(db_, rc, p->op, "SAVEPOINT");
        continue;
      }
      SqliteTx tx(this, p->op);
      p->status = p->fn(tx);
      if (sqlite3_get_autocommit(db_)) {  // SQLite rolled it all back.
        if (p->status.ok()) {
          p->status = absl::InternalError(
              absl::StrCat(p->op, ": the transaction ended by itself"));
        }
        for (Pending* a : applied) {
          a->status = absl::UnavailableError(
              absl::StrCat(a->op, ": rolled back with its group commit: ",
                           p->status.message(), "; retry"));
        }
        applied.clear();
        open = false;
        continue;
      }
      if (p->status.ok()) {
        exec("RELEASE batched");
        applied.push_back(p);
      } else {
        exec("ROLLBACK TO batched");
        exec("RELEASE batched");
      }
    }
    if (!open) return;
    for (Pending* a : applied) {
      if (hooks_.before_commit) hooks_.before_commit(a->op);
    }
    if (int rc = exec("COMMIT"); rc != SQLITE_OK) {
      for (Pending* a : applied) {
        a->status = SqliteError(db_, rc, a->op, "COMMIT");
      }
      if (!sqlite3_get_autocommit(db_)) exec("ROLLBACK");
    }
  }

  absl::StatusOr<Prepared*> Prepare(absl::string_view sql,
                                    absl::string_view op) {
    auto it = cache_.find(sql);
    if (it != cache_.end()) return &it->second;
    Prepared p;
    int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                SQLITE_PREPARE_PERSISTENT, &p.stmt, nullptr);
    if (rc != SQLITE_OK) {
      return SqliteError(db_, rc, op, absl::StrCat("prepare of [", sql, "]"));
    }
    int slots = sqlite3_bind_parameter_count(p.stmt);
    p.slot_to_param.assign(slots + 1, -1);
    for (int s = 1; s <= slots; ++s) {
      const char* name = sqlite3_bind_parameter_name(p.stmt, s);
      int n = 0;
      if (name != nullptr && name[0] == '$' && absl::SimpleAtoi(name + 1, &n) &&
          n >= 1) {
        p.slot_to_param[s] = n - 1;
      } else {
        sqlite3_finalize(p.stmt);
        return absl::InternalError(absl::StrCat(
            op, ": statement uses a placeholder other than $N: ", sql));
      }
    }
    return &cache_.emplace(std::string(sql), std::move(p)).first->second;
  }

  absl::StatusOr<SqlResult> Exec(absl::string_view op, int index,
                                 absl::string_view sql,
                                 absl::Span<const SqlValue> params) {
    if (hooks_.before_statement) hooks_.before_statement(op, index);
    absl::StatusOr<Prepared*> prepared = Prepare(sql, op);
    if (!prepared.ok()) return prepared.status();
    sqlite3_stmt* stmt = (*prepared)->stmt;
    const std::vector<int>& slots = (*prepared)->slot_to_param;
    for (size_t s = 1; s < slots.size(); ++s) {
      int p = slots[s];
      if (p < 0 || p >= static_cast<int>(params.size())) {
        sqlite3_reset(stmt);
        return absl::InternalError(
            absl::StrCat(op, ": statement needs parameter $", p + 1,
                         " but got ", params.size(), ": ", sql));
      }
      const SqlValue& v = params[p];
      int s_i = static_cast<int>(s);
      switch (v.kind()) {
        case SqlValue::Kind::kNull:
          sqlite3_bind_null(stmt, s_i);
          break;
        case SqlValue::Kind::kInt:
          sqlite3_bind_int64(stmt, s_i, v.int_value());
          break;
        case SqlValue::Kind::kDouble:
          sqlite3_bind_double(stmt, s_i, v.double_value());
          break;
        case SqlValue::Kind::kText:
          sqlite3_bind_text(stmt, s_i, v.text().data(),
                            static_cast<int>(v.text().size()),
                            SQLITE_TRANSIENT);
          break;
        case SqlValue::Kind::kBytes:
          sqlite3_bind_blob(stmt, s_i, v.text().data(),
                            static_cast<int>(v.text().size()),
                            SQLITE_TRANSIENT);
          break;
      }
    }
    SqlResult result;
    int rc;
    const int columns = sqlite3_column_count(stmt);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      std::vector<SqlValue> row;
      row.reserve(columns);
      for (int c = 0; c < columns; ++c) {
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_NULL:
            row.emplace_back();
            break;
          case SQLITE_INTEGER:
            row.emplace_back(
                static_cast<int64_t>(sqlite3_column_int64(stmt, c)));
            break;
          case SQLITE_FLOAT:
            row.emplace_back(sqlite3_column_double(stmt, c));
            break;
          case SQLITE_TEXT: {
            const char* t =
                reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
            row.emplace_back(std::string(
                t, static_cast<size_t>(sqlite3_column_bytes(stmt, c))));
            break;
          }
          default: {
            const char* b =
                static_cast<const char*>(sqlite3_column_blob(stmt, c));
            size_t n = static_cast<size_t>(sqlite3_column_bytes(stmt, c));
            row.emplace_back(internal::Bytes{
                std::string(b == nullptr ? "" : b, b == nullptr ? 0 : n)});
            break;
          }
        }
      }
      result.rows.emplace_back(std::move(row));
    }
    absl::Status status;
    if (rc != SQLITE_DONE) status = SqliteError(db_, rc, op, "statement");
    result.affected = sqlite3_changes64(db_);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    if (!status.ok()) return status;
    return result;
  }

  absl::Status Script(absl::string_view op, absl::string_view sql) {
    std::string copy(sql);
    char* err = nullptr;
    int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, &err);
    if (rc != SQLITE_OK) {
      absl::Status status = SqliteError(db_, rc, op, "script");
      sqlite3_free(err);
      return status;
    }
    return absl::OkStatus();
  }

  // Guards the group-commit queue (pending_, leading_); taken before mu_,
  // never while holding it.
  std::mutex batch_mu_;
  std::condition_variable batch_cv_;
  std::vector<Pending*> pending_;
  bool leading_ = false;

  // Guards the connection and cache_; RunAlone, RunBatch, Prepare, Exec and
  // Script run with it held. std::mutex rather than absl::Mutex so that
  // ThreadSanitizer sees it (Debian's Abseil is not instrumented).
  std::mutex mu_;
  sqlite3* const db_;
  const DriverHooks hooks_;
  absl::flat_hash_map<std::string, Prepared> cache_;
};

absl::StatusOr<SqlResult> SqliteTx::Exec(absl::string_view sql,
                                         absl::Span<const SqlValue> params) {
  return driver_->Exec(op_, index_++, sql, params);
}

absl::Status SqliteTx::ExecScript(absl::string_view sql) {
  ++index_;
  return driver_->Script(op_, sql);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqlDriver>> OpenSqliteDriver(
    absl::string_view path, absl::Duration busy_timeout, DriverHooks hooks) {
  sqlite3* db = nullptr;
  std::string p(path);
  int rc = sqlite3_open_v2(
      p.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open SQLite database '", path, "': ", msg,
                     "; check that the directory exists and is writable"));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(
      db, static_cast<int>(absl::ToInt64Milliseconds(busy_timeout)));
  // WAL: readers never block the writer; NORMAL sync is durable across
  // application crashes (an OS crash may lose the transactions since the
  // last checkpoint, which syncs the WAL). 1 KiB pages (a new file only;
  // an existing one keeps its size): a dispatch changes about 20 pages of
  // the queue's tables and indexes and each commit appends every changed
  // page to the WAL, so smaller pages write a quarter of the bytes. A
  // checkpoint every 4,000 WAL pages keeps the WAL's size at SQLite's
  // default (1,000 pages of 4 KiB) and its checkpoints, which copy pages
  // back and sync both files on the committing thread, a quarter as
  // frequent: about 200 dispatches apart instead of 50. Together 1.17x
  // dispatches/s (docs/measurements/dispatch.md, "SQLite pages and
  // checkpoints").
  const char* pragmas =
      "PRAGMA page_size=1024; PRAGMA journal_mode=WAL; "
      "PRAGMA synchronous=NORMAL; PRAGMA wal_autocheckpoint=4000; "
      "PRAGMA foreign_keys=ON;";
  char* err = nullptr;
  rc = sqlite3_exec(db, pragmas, nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    absl::Status status = SqliteError(db, rc, "open", "PRAGMA");
    sqlite3_free(err);
    sqlite3_close_v2(db);
    return status;
  }
  return std::unique_ptr<SqlDriver>(new SqliteDriver(db, std::move(hooks)));
}

}  // namespace densegate::results::internal
