// `densegate version`: the version, the commit it was built from and how.
#include <iostream>

#include "cli/build_info.h"
#include "cli/command.h"

namespace densegate::cli {

void AddVersionCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "version", "Print the version, git commit and build flags.");
  cmd->callback([exit_code] {
    std::cout << "densegate " << kVersion << "\n"
              << "commit     " << kGitCommit << "\n"
              << "build      " << kBuildFlags << "\n";
    *exit_code = kExitAccept;
  });
}

}  // namespace densegate::cli
