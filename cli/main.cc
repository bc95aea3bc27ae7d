// densegate: decides which performance changes are real. See README.md.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"

int main(int argc, char** argv) {
  CLI::App app{
      "densegate: verifies performance changes to an inference stack "
      "(correctness, long-context precision, A/B benchmarks) before they merge.",
      "densegate"};
  app.require_subcommand(1);
  app.fallthrough(false);
  app.footer("Run 'densegate COMMAND --help' for a command's flags.");

  int exit_code = densegate::cli::kExitUsage;
  densegate::cli::AddVersionCommand(app, &exit_code);
  densegate::cli::AddManifestCommand(app, &exit_code);
  densegate::cli::AddDbCommand(app, &exit_code);
  densegate::cli::AddVerdictCommand(app, &exit_code);
  densegate::cli::AddEvalCommand(app, &exit_code);
  densegate::cli::AddServeCommand(app, &exit_code);
  densegate::cli::AddNodeCommand(app, &exit_code);
  densegate::cli::AddReportCommand(app, &exit_code);
  densegate::cli::AddDemoCommand(app, &exit_code);
  densegate::cli::AddTokenCommand(app, &exit_code);
  densegate::cli::AddFeedbackCommand(app, &exit_code);
  densegate::cli::AddAgentCommand(app, &exit_code);
  densegate::cli::AddClientCommands(app, &exit_code);

  // CLI11 reports an unknown command as "a subcommand is required"; name it.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      std::cerr << "densegate: unknown command '" << argv[1] << "'; commands: "
                << CLI::detail::join(names, ", ") << "\n"
                << "Run 'densegate --help' for usage.\n";
      return densegate::cli::kExitUsage;
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "densegate: " << e.what() << "\n"
              << "Run 'densegate --help' (or 'densegate COMMAND --help') for "
                 "usage.\n";
    return densegate::cli::kExitUsage;
  }
  return exit_code;
}
