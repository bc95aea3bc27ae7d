// SQLite: write transactions are exclusive (BEGIN IMMEDIATE), so no row
// locks; ids travel as a JSON array read back with json_each.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "results/store/internal/sql_dialect.h"

namespace densegate::results::internal {

class SqliteDialect : public SqlDialect {
 public:
  absl::string_view name() const override { return "sqlite"; }
  absl::string_view RowLock() const override { return ""; }
  absl::string_view SharedRowLock() const override { return ""; }
  absl::string_view SkipLockedRowLock() const override { return ""; }
  absl::string_view LockJobRow() const override { return ""; }
  SqlValue IdArray(const std::vector<int64_t>& ids) const override {
    return SqlValue(absl::StrCat("[", absl::StrJoin(ids, ","), "]"));
  }
  std::string SelectIds(int param) const override {
    return absl::StrCat("SELECT value FROM json_each($", param, ")");
  }
  absl::string_view InsertVerdictSamples() const override {
    return "INSERT INTO verdict_samples (evaluation_id, sample_id) "
           "SELECT $1, value FROM json_each($2)";
  }
  bool OneStatementWrites() const override { return false; }
  absl::string_view AnalyzeQueue() const override { return ""; }
};

const SqlDialect& SqliteDialectInstance() {
  static const SqliteDialect* const dialect = new SqliteDialect;
  return *dialect;
}

}  // namespace densegate::results::internal
