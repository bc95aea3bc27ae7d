// The subcommands of the `densegate` binary.
//
// main.cc builds the root command line and calls one Add*Command function per
// subcommand; each lives in its own file, parses its own flags and, when it
// runs, stores the process exit code in `*exit_code`. Subcommands write their
// results to stdout and their diagnostics to stderr.
//
// Thread-safety: used from main's thread only.
#ifndef DENSEGATE_CLI_COMMAND_H_
#define DENSEGATE_CLI_COMMAND_H_

#include "CLI/CLI.hpp"

namespace densegate::cli {

// Exit codes shared by every subcommand (docs/design.md, section 6).
enum ExitCode : int {
  kExitAccept = 0,
  kExitReject = 1,
  kExitUsage = 2,  // Usage or input error: bad flag, missing file, bad manifest.
  kExitInconclusive = 3,
  kExitInfrastructure = 4,
};

void AddVersionCommand(CLI::App& app, int* exit_code);
void AddManifestCommand(CLI::App& app, int* exit_code);
void AddDbCommand(CLI::App& app, int* exit_code);
void AddVerdictCommand(CLI::App& app, int* exit_code);
void AddEvalCommand(CLI::App& app, int* exit_code);
void AddServeCommand(CLI::App& app, int* exit_code);
void AddNodeCommand(CLI::App& app, int* exit_code);
void AddReportCommand(CLI::App& app, int* exit_code);
void AddDemoCommand(CLI::App& app, int* exit_code);
void AddTokenCommand(CLI::App& app, int* exit_code);
void AddFeedbackCommand(CLI::App& app, int* exit_code);
void AddAgentCommand(CLI::App& app, int* exit_code);
// submit, status, watch, cancel, list.
void AddClientCommands(CLI::App& app, int* exit_code);

}  // namespace densegate::cli

#endif  // DENSEGATE_CLI_COMMAND_H_
