// The PostgreSQL backend (production), through libpqxx.
//
// A pool of connections: each call borrows one for one transaction, so many
// threads (and several scheduler replicas) work at once. Claims lock queue
// rows with FOR UPDATE SKIP LOCKED, so concurrent claimers never wait for
// each other or take the same job. Statements are prepared once per
// connection. If the connection is lost (server restart, backend
// terminated) the call returns UnavailableError and nothing it did was
// committed; the next call reconnects. No libpqxx exception leaves the
// store.
#ifndef DENSEGATE_RESULTS_STORE_POSTGRES_STORE_H_
#define DENSEGATE_RESULTS_STORE_POSTGRES_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "results/store/store.h"

namespace densegate::results {

// `url`: a libpq connection URI (postgresql://user@host:port/db?...) or a
// keyword/value string. Unavailable when the server cannot be reached.
absl::StatusOr<std::unique_ptr<Store>> OpenPostgresStore(
    absl::string_view url, const StoreOptions& options = {});

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STORE_POSTGRES_STORE_H_
