// `densegate demo`: the whole loop on this machine (demo/demo.h).
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "demo/demo.h"

namespace densegate::cli {
namespace {

struct DemoArgs {
  demo::DemoOptions options;
  int timeout_min = 60;
};

std::string SelfPath() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, n) : std::string();
}

int Demo(DemoArgs& a) {
  demo::DemoOptions& o = a.options;
  o.densegate_binary = SelfPath();
  if (o.source_root.empty()) {
    // tools/densegate exports the checkout it built from; otherwise the
    // current directory must be one.
    const char* env = std::getenv("DENSEGATE_SOURCE_ROOT");
    o.source_root = env != nullptr ? env : ".";
  }
  std::error_code ec;
  o.source_root = std::filesystem::absolute(o.source_root, ec).lexically_normal().string();
  if (!std::filesystem::exists(o.source_root + "/examples/scenario.json")) {
    std::cerr << "densegate demo: " << o.source_root
              << " is not a densegate checkout (no examples/scenario.json); pass --source\n";
    return kExitUsage;
  }
  if (o.cache_dir.empty()) {
    const char* home = std::getenv("HOME");
    o.cache_dir = std::string(home != nullptr ? home : "/tmp") + "/.cache/densegate/demo";
  }
  o.out_dir = std::filesystem::absolute(o.out_dir, ec).lexically_normal().string();
  o.cache_dir = std::filesystem::absolute(o.cache_dir, ec).lexically_normal().string();
  o.timeout = absl::Minutes(a.timeout_min);
  return demo::RunDemo(o, std::cout);
}

}  // namespace

void AddDemoCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "Run the whole loop here: a scheduler and two pinned nodes on SQLite, seven candidate "
      "commits of this repository's workload (examples/), live progress, the verdicts and the "
      "report. Exit 0 only if every candidate got the decision it should.");
  auto args = std::make_shared<DemoArgs>();
  args->options.out_dir = "densegate-demo";
  cmd->add_flag("--quick", args->options.quick,
                "fewer pairs and a smaller serving run (examples/workload/quick.json), same scenario and decisions");
  cmd->add_option("--out", args->options.out_dir, "store, logs and report.{html,md,json}")
      ->capture_default_str();
  cmd->add_option("--source", args->options.source_root,
                  "densegate checkout with the workload and examples/ (default: the one "
                  "tools/densegate built, else the current directory)");
  cmd->add_option("--cache", args->options.cache_dir,
                  "scratch repository and node workspaces, kept for fast reruns "
                  "(default ~/.cache/densegate/demo)");
  cmd->add_option("--timeout_min", args->timeout_min, "give up (exit 4) after this long")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--allow_inconclusive", args->options.allow_inconclusive,
                "a candidate that should be accepted but ends inconclusive (gain or no-slowdown "
                "not proven within the pair budget, e.g. on a noisy shared machine) is not a "
                "miss; wrong accepts and rejects still are (what CI runs)");
  cmd->add_flag("--unsafe_no_sandbox", args->options.unsafe_no_sandbox,
                "development only: the nodes run candidates without the bubblewrap sandbox, "
                "with their own rights (machines without it; measuring its cost); every "
                "verdict says so");
  cmd->add_flag("--prepare_only", args->options.prepare_only,
                "only create the scratch repository (checks that every patch applies)");
  cmd->callback([args, exit_code] { *exit_code = Demo(*args); });
}

}  // namespace densegate::cli
