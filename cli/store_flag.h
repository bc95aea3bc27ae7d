// The --db flag shared by subcommands that open the store.
//
// Default: $DENSEGATE_DB, else an SQLite file under the data directory
// ($XDG_DATA_HOME/densegate, or ~/.local/share/densegate), created on first
// use. `postgresql://...` selects PostgreSQL.
#ifndef DENSEGATE_CLI_STORE_FLAG_H_
#define DENSEGATE_CLI_STORE_FLAG_H_

#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "results/store/store.h"

namespace densegate::cli {

// Adds --db to `cmd`, storing into `*url` (pre-filled with the default).
void AddDbFlag(CLI::App* cmd, std::string* url);

// Opens the store at `url` with `options` (options.migrate: apply pending
// migrations).
absl::StatusOr<std::unique_ptr<results::Store>> OpenStoreFromFlag(
    const std::string& url, const results::StoreOptions& options);

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_STORE_FLAG_H_
