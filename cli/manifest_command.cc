// `densegate manifest check [PATH]`: parse and validate a manifest.
#include <iostream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "manifest/manifest.h"

namespace densegate::cli {
namespace {

int CheckManifest(const std::string& path) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> manifest = LoadManifestFile(path, &errors);
  if (!manifest.ok()) {
    std::cerr << path << ": " << errors.size()
              << (errors.size() == 1 ? " error" : " errors") << "\n";
    for (const ManifestError& e : errors) {
      std::cerr << "  " << e.ToString() << "\n";
    }
    return kExitUsage;
  }
  int metrics = 0;
  for (const auto& b : manifest->benchmarks()) metrics += b.metrics_size();
  std::cout << path << ": OK (" << manifest->name() << ": "
            << manifest->correctness_size() << " correctness suites, "
            << manifest->kernel_checks_size() << " kernel checks, "
            << manifest->precision_size() << " precision suites, "
            << manifest->benchmarks_size() << " benchmarks with " << metrics
            << " metrics, " << manifest->protected_paths_size()
            << " protected paths)\n";
  const std::vector<ManifestError> warnings = ManifestWarnings(*manifest);
  for (const ManifestError& w : warnings) std::cerr << "  warning: " << w.ToString() << "\n";
  if (!warnings.empty()) {
    std::cerr << path << ": " << warnings.size()
              << (warnings.size() == 1 ? " warning" : " warnings")
              << ": gains there are not checked against a trusted measurement "
                 "(harness/README.md, \"Benchmark-only gains\")\n";
  }
  return kExitAccept;
}

}  // namespace

void AddManifestCommand(CLI::App& app, int* exit_code) {
  CLI::App* manifest =
      app.add_subcommand("manifest", "Work with densegate.json manifests.");
  manifest->require_subcommand(1);

  CLI::App* check = manifest->add_subcommand(
      "check",
      "Parse and validate a manifest; print OK or every error with its field "
      "path (exit 2 on error), and warn about benchmark metrics whose gains no "
      "trusted measurement confirms.");
  auto path = std::make_shared<std::string>("densegate.json");
  check->add_option("path", *path,
                    "Manifest file; its directory is the repository root")
      ->capture_default_str();
  check->callback([path, exit_code] { *exit_code = CheckManifest(*path); });
}

}  // namespace densegate::cli
