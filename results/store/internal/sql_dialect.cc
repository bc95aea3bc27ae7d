#include "results/store/internal/sql_dialect.h"

namespace densegate::results::internal {

// Each defined beside its type (sqlite_dialect.cc, postgres_dialect.cc).
const SqlDialect& SqliteDialectInstance();
const SqlDialect& PostgresDialectInstance();

const SqlDialect& SqlDialectOf(Dialect dialect) {
  return dialect == Dialect::kPostgres ? PostgresDialectInstance() : SqliteDialectInstance();
}

}  // namespace densegate::results::internal
