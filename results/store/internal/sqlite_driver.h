// SqlDriver over one SQLite connection (WAL, busy timeout, foreign keys on).
// Calls are serialized by a mutex, and write transactions that arrive while
// another runs are committed together (group commit: each in a savepoint of
// one transaction, so each still succeeds or fails alone). Several drivers
// (threads, processes) may open the same file, and SQLite's file lock
// serializes their writes.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQLITE_DRIVER_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQLITE_DRIVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal {

// `path` is a file path or ":memory:".
absl::StatusOr<std::unique_ptr<SqlDriver>> OpenSqliteDriver(
    absl::string_view path, absl::Duration busy_timeout,
    DriverHooks hooks = {});

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQLITE_DRIVER_H_
