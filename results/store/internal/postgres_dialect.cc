// PostgreSQL: transactions run side by side, so rows are locked as they
// are read (NO KEY UPDATE, which foreign keys to the row do not wait for);
// ids travel as a BIGINT[] read back with unnest; the hot writes take one
// statement each (sql_statements.h).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "results/store/internal/sql_dialect.h"

namespace densegate::results::internal {

class PostgresDialect : public SqlDialect {
 public:
  absl::string_view name() const override { return "postgresql"; }
  absl::string_view RowLock() const override { return " FOR NO KEY UPDATE"; }
  absl::string_view SharedRowLock() const override { return " FOR SHARE"; }
  absl::string_view SkipLockedRowLock() const override {
    return " FOR NO KEY UPDATE SKIP LOCKED";
  }
  absl::string_view LockJobRow() const override {
    return "SELECT id FROM jobs WHERE id = $1 FOR NO KEY UPDATE";
  }
  SqlValue IdArray(const std::vector<int64_t>& ids) const override {
    return SqlValue(absl::StrCat("{", absl::StrJoin(ids, ","), "}"));
  }
  std::string SelectIds(int param) const override {
    return absl::StrCat("SELECT unnest(CAST($", param, " AS BIGINT[]))");
  }
  absl::string_view InsertVerdictSamples() const override {
    return "INSERT INTO verdict_samples (evaluation_id, sample_id) "
           "SELECT CAST($1 AS TEXT), unnest(CAST($2 AS BIGINT[]))";
  }
  bool OneStatementWrites() const override { return true; }
  absl::string_view AnalyzeQueue() const override { return "ANALYZE jobs"; }
};

const SqlDialect& PostgresDialectInstance() {
  static const PostgresDialect* const dialect = new PostgresDialect;
  return *dialect;
}

}  // namespace densegate::results::internal
