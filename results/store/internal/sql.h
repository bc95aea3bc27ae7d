// The small SQL layer the store is written against: values, rows, a
// transaction, and a driver that runs a function inside one transaction.
// Two drivers implement it (sqlite_driver.h, pg_driver.h). Statements use
// PostgreSQL's $1, $2, ... placeholders in both; SQLite binds them by name.
//
// Internal to results/store.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_H_

#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace densegate::results::internal {

enum class Dialect { kSqlite, kPostgres };

// Marks a parameter as bytes (BLOB / BYTEA) rather than text.
struct Bytes {
  std::string data;
};

// A parameter or a column value. PostgreSQL results arrive as text and are
// parsed by the accessors of SqlRow.
class SqlValue {
 public:
  enum class Kind { kNull, kInt, kDouble, kText, kBytes };

  SqlValue() = default;
  template <std::integral T>
  requires(!std::same_as<T, bool>) SqlValue(T v)
      : kind_(Kind::kInt), int_(static_cast<int64_t>(v)) {}
  SqlValue(double v) : kind_(Kind::kDouble), double_(v) {}
  SqlValue(std::string v) : kind_(Kind::kText), text_(std::move(v)) {}
  SqlValue(absl::string_view v) : kind_(Kind::kText), text_(v) {}
  SqlValue(const char* v) : kind_(Kind::kText), text_(v) {}
  SqlValue(Bytes v) : kind_(Kind::kBytes), text_(std::move(v.data)) {}

  Kind kind() const { return kind_; }
  int64_t int_value() const { return int_; }
  double double_value() const { return double_; }
  // Text, or the raw bytes of kBytes.
  const std::string& text() const { return text_; }

 private:
  Kind kind_ = Kind::kNull;
  int64_t int_ = 0;
  double double_ = 0;
  std::string text_;
};

class SqlRow {
 public:
  explicit SqlRow(std::vector<SqlValue> values) : values_(std::move(values)) {}
  size_t size() const { return values_.size(); }
  bool IsNull(int i) const;
  // NULL reads as 0 / 0.0 / "".
  int64_t Int(int i) const;
  double Double(int i) const;
  std::string Text(int i) const;
  // BYTEA arrives from PostgreSQL as "\x<hex>" text; decoded here.
  std::string Bytes(int i) const;

 private:
  std::vector<SqlValue> values_;
};

struct SqlResult {
  std::vector<SqlRow> rows;
  // Rows changed by INSERT / UPDATE / DELETE.
  int64_t affected = 0;
};

class SqlTx {
 public:
  virtual ~SqlTx() = default;
  virtual absl::StatusOr<SqlResult> Exec(
      absl::string_view sql, absl::Span<const SqlValue> params = {}) = 0;
  // Several ;-separated statements without parameters (migrations).
  virtual absl::Status ExecScript(absl::string_view sql) = 0;
};

// Test hooks; they default to doing nothing.
struct DriverHooks {
  // Called before statement number `index` (0-based) of a transaction runs;
  // `op` names the store operation, e.g. "Submit".
  std::function<void(absl::string_view op, int index)> before_statement;
  // Called after `op`'s statements succeeded, just before COMMIT.
  std::function<void(absl::string_view op)> before_commit;
};

enum class TxMode {
  // A transaction that only reads.
  kRead,
  // A transaction that writes (SQLite takes the write lock up front, BEGIN
  // IMMEDIATE, so it never fails to upgrade later).
  kWrite,
  // `fn` runs exactly one statement, atomic by itself: PostgreSQL runs it in
  // autocommit mode, saving the BEGIN and COMMIT round trips. If the
  // connection is lost while it runs, whether it took effect is unknown.
  // SQLite treats it as kWrite.
  kSingleStatement,
};

class SqlDriver {
 public:
  virtual ~SqlDriver() = default;
  virtual Dialect dialect() const = 0;
  // Runs `fn` in one transaction: commits when it returns OK, rolls back
  // otherwise (its status is returned). `op` names the operation in error
  // messages. Thread-safe.
  virtual absl::Status Transact(absl::string_view op, TxMode mode,
                                absl::FunctionRef<absl::Status(SqlTx&)> fn) = 0;

  // Runs one statement on its own, atomic by itself, as Transact with
  // kSingleStatement would, where the driver may queue it behind other
  // callers' statements on one connection instead: PostgreSQL's driver
  // sends these to one pipelined connection (pg_pipeline.h), which runs
  // them one after another without a round trip in between. The default
  // is Transact(op, kSingleStatement, ...). Thread-safe.
  virtual absl::StatusOr<SqlResult> ExecPipelined(
      absl::string_view op, absl::string_view sql,
      absl::Span<const SqlValue> params);
};

// Helpers shared by the drivers.
std::string HexEncode(absl::string_view bytes);
// Formats a double so that it reads back to the same value.
std::string DoubleToSqlText(double v);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_H_
