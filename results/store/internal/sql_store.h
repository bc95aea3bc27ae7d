// The Store implemented once over the SQL layer (sql.h); the SQLite and
// PostgreSQL backends differ only in their driver, their DDL and a few
// statements (claims use FOR UPDATE SKIP LOCKED on PostgreSQL).
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "results/store/internal/sql.h"
#include "results/store/store.h"

namespace densegate::results::internal {

// Wraps `driver`; migrates (options.migrate) or checks that the schema is
// current.
absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(
    std::unique_ptr<SqlDriver> driver, const StoreOptions& options);

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_
