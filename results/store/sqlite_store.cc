#include "results/store/sqlite_store.h"

#include <utility>

#include "results/store/internal/sql_store.h"
#include "results/store/internal/sqlite_driver.h"

namespace densegate::results {

absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(
    absl::string_view path, const StoreOptions& options) {
  if (path.empty()) {
    return absl::InvalidArgumentError("SQLite store path is empty");
  }
  absl::StatusOr<std::unique_ptr<internal::SqlDriver>> driver =
      internal::OpenSqliteDriver(path, options.busy_timeout);
  if (!driver.ok()) return driver.status();
  return internal::OpenSqlStore(*std::move(driver), options);
}

}  // namespace densegate::results
