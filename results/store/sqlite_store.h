// The SQLite backend: the embedded default, one database file.
//
// WAL journal (readers never wait for the writer), synchronous=NORMAL,
// foreign keys on, a busy timeout (StoreOptions::busy_timeout) for writers
// waiting on each other. Each store holds one connection and serializes its
// calls; several stores (threads, processes) may open the same file. Writes
// take the file's write lock up front (BEGIN IMMEDIATE), so a claim is one
// short exclusive transaction.
#ifndef DENSEGATE_RESULTS_STORE_SQLITE_STORE_H_
#define DENSEGATE_RESULTS_STORE_SQLITE_STORE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "results/store/store.h"

namespace densegate::results {

// `path`: a file (created if missing; its directory must exist) or
// ":memory:".
absl::StatusOr<std::unique_ptr<Store>> OpenSqliteStore(
    absl::string_view path, const StoreOptions& options = {});

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STORE_SQLITE_STORE_H_
