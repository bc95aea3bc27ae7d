// SqlDriver over libpqxx: a pool of connections, one per concurrent call,
// statements prepared once per connection, and one more connection in
// libpq's pipeline mode for ExecPipelined (pg_pipeline.h). libpqxx's exceptions
// stay inside: they become absl::Status here. A lost connection (server
// restarted, backend terminated, network) is UnavailableError and the
// connection is dropped; the next call opens a new one.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_PG_DRIVER_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_PG_DRIVER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "results/store/internal/sql.h"

namespace densegate::results::internal {

// `url`: a libpq connection URI or keyword/value string. Connects once to
// check the server is reachable (Unavailable if not).
absl::StatusOr<std::unique_ptr<SqlDriver>> OpenPgDriver(
    absl::string_view url, int max_idle_connections, DriverHooks hooks = {});

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_PG_DRIVER_H_
