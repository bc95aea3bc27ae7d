// SqlDialect: what the SQL store writes differently on SQLite and on
// PostgreSQL, behind one interface: row locks (SQLite's write transactions
// are exclusive and need none), how a list of ids travels as one parameter
// (a JSON array for json_each, a BIGINT[] for unnest), and whether the
// store takes PostgreSQL's one-statement paths for the hot writes (claim,
// renew, finish, finish-and-claim in batches: sql_statements.h), with its
// claim statements limited and batched (StoreOptions::max_concurrent_claims)
// and the queue's statistics refreshed as it grows. SqliteDialect and
// PostgresDialect are its two types, one file each. Private to
// results/store.
//
// Thread-safety: immutable; the two instances live as long as the program.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_DIALECT_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_DIALECT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal {

class SqlDialect {
 public:
  virtual ~SqlDialect() = default;

  // "sqlite" or "postgresql" (Store::backend()).
  virtual absl::string_view name() const = 0;

  // Appended to a SELECT that reads rows the transaction will update, or
  // only relies on (shared), or claims when nobody else holds them (skip
  // locked): empty on SQLite.
  virtual absl::string_view RowLock() const = 0;
  virtual absl::string_view SharedRowLock() const = 0;
  virtual absl::string_view SkipLockedRowLock() const = 0;
  // A statement ($1: a job id) locking that job's row before its lease's
  // row is written, in the order the one-statement paths lock them; empty
  // when the dialect needs none.
  virtual absl::string_view LockJobRow() const = 0;

  // `ids` as one parameter, and a SELECT of them back from parameter
  // $`param` (one column, one row each).
  virtual SqlValue IdArray(const std::vector<int64_t>& ids) const = 0;
  virtual std::string SelectIds(int param) const = 0;
  // Records a verdict's samples: $1 evaluation id, $2 IdArray of sample ids.
  virtual absl::string_view InsertVerdictSamples() const = 0;

  // Whether claims, renewals and finishes take one statement in autocommit
  // (sql_statements.h), with claims limited to `max_concurrent_claims` at a
  // time and concurrent finish-and-claims sharing a statement; otherwise
  // each is a transaction of several statements.
  virtual bool OneStatementWrites() const = 0;
  // Refreshes the planner's statistics of the queue (empty: none needed),
  // run every so many submissions.
  virtual absl::string_view AnalyzeQueue() const = 0;
};

// The dialect of a driver's database.
const SqlDialect& SqlDialectOf(Dialect dialect);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_DIALECT_H_
