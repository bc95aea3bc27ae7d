// `densegate db migrate`: bring a store's schema up to date.
#include <iostream>

#include "cli/command.h"
#include "cli/store_flag.h"

namespace densegate::cli {

void AddDbCommand(CLI::App& app, int* exit_code) {
  CLI::App* db = app.add_subcommand("db", "Manage the store (SQLite or PostgreSQL).");
  db->require_subcommand(1);
  CLI::App* migrate = db->add_subcommand(
      "migrate", "Apply pending schema migrations (idempotent) and print the version.");
  auto url = std::make_shared<std::string>();
  AddDbFlag(migrate, url.get());
  migrate->callback([url, exit_code] {
    // Opening with migrate=true applies what is pending; Migrate() below
    // then confirms there is nothing left and reports the version.
    auto store = OpenStoreFromFlag(*url, {.migrate = true});
    if (!store.ok()) {
      std::cerr << "densegate db migrate: cannot open " << *url << ": "
                << store.status().message() << "\n";
      *exit_code = store.status().code() == absl::StatusCode::kInvalidArgument
                       ? kExitUsage
                       : kExitInfrastructure;
      return;
    }
    absl::Status migrated = (*store)->Migrate();
    auto version = (*store)->SchemaVersion();
    if (!migrated.ok() || !version.ok()) {
      std::cerr << "densegate db migrate: " << (migrated.ok() ? version.status() : migrated)
                << "\n";
      *exit_code = kExitInfrastructure;
      return;
    }
    std::cout << (*store)->backend() << " store " << *url << ": schema version "
              << *version << "\n";
    *exit_code = kExitAccept;
  });
}

}  // namespace densegate::cli
