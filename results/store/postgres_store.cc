#include "results/store/postgres_store.h"

#include <utility>

#include "results/store/internal/pg_driver.h"
#include "results/store/internal/sql_store.h"

namespace densegate::results {

absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(
    absl::string_view url, const StoreOptions& options) {
  if (url.empty()) {
    return absl::InvalidArgumentError("PostgreSQL store URL is empty");
  }
  absl::StatusOr<std::unique_ptr<internal::SqlDriver>> driver =
      internal::OpenPgDriver(url, options.max_idle_connections);
  if (!driver.ok()) return driver.status();
  return internal::OpenSqlStore(*std::move(driver), options);
}

}  // namespace densegate::results
