// The Store implemented once over the SQL layer (sql.h); the SQLite and
// PostgreSQL backends differ only in their driver, their DDL and a few
// statements (claims use FOR UPDATE SKIP LOCKED on PostgreSQL).
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "results/store/internal/sql.h"
#include "results/store/store.h"

namespace densegate::results::internal {

// Test hooks of the store itself; they default to doing nothing.
struct SqlStoreHooks {
  // Called when a claim has to wait for its turn
  // (StoreOptions::max_concurrent_claims), and when a FinishLeaseAndClaimNext
  // waits for a batch to run it.
  std::function<void()> claim_waits;
};

// Wraps `driver`; migrates (options.migrate) or checks that the schema is
// current.
absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(
    std::unique_ptr<SqlDriver> driver, const StoreOptions& options,
    SqlStoreHooks hooks = {});

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_H_
