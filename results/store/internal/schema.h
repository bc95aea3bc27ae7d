// The store's schema as numbered migrations, and the runner that applies
// them (recording each in schema_migrations).
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SCHEMA_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SCHEMA_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal {

struct Migration {
  int version;
  const char* name;
  // The DDL for a dialect; one script, run inside the migration's
  // transaction.
  std::string (*sql)(Dialect dialect);
};

// Every migration of this binary, in version order (1, 2, ...).
absl::Span<const Migration> AllMigrations();

// Highest applied version; 0 when schema_migrations does not exist.
absl::StatusOr<int> CurrentSchemaVersion(SqlDriver& driver);

// Applies the migrations above the database's version, in one transaction
// (PostgreSQL: under an advisory lock, so concurrent runs wait).
// FailedPrecondition when the database is at a version above the highest of
// `migrations`. `now_us` is recorded as applied_at_us.
absl::Status ApplyMigrations(SqlDriver& driver,
                             absl::Span<const Migration> migrations,
                             int64_t now_us);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SCHEMA_H_
