// `densegate report`: a branch's regression report from the store, as
// HTML, Markdown and JSON files (results/report).
#include <fstream>
#include <iostream>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "cli/command.h"
#include "cli/store_flag.h"
#include "results/report/report.h"

namespace densegate::cli {
namespace {

struct ReportArgs {
  std::string db;
  std::string repo, branch, since;
  std::string out = ".";
  std::string formats = "html,md,json";
};

int Report(const ReportArgs& a) {
  results::ReportRequest request;
  request.repo = a.repo;
  request.branch = a.branch;
  if (!a.since.empty()) {
    std::string error;
    if (!absl::ParseTime("%Y-%m-%d", a.since, &request.since, &error) &&
        !absl::ParseTime(absl::RFC3339_full, a.since, &request.since, &error)) {
      std::cerr << "densegate report: --since \"" << a.since
                << "\": expected YYYY-MM-DD or an RFC 3339 time\n";
      return kExitUsage;
    }
  }
  std::vector<std::string> formats = absl::StrSplit(a.formats, ',', absl::SkipEmpty());
  for (const std::string& f : formats) {
    if (f != "html" && f != "md" && f != "json") {
      std::cerr << "densegate report: --format \"" << f << "\": expected html, md or json\n";
      return kExitUsage;
    }
  }
  absl::StatusOr<std::unique_ptr<results::Store>> store =
      OpenStoreFromFlag(a.db, {.migrate = false});
  if (!store.ok()) {
    std::cerr << "densegate report: cannot open " << a.db << ": " << store.status().message()
              << "\n";
    return kExitInfrastructure;
  }
  absl::StatusOr<results::Report> report = results::BuildReport(**store, request, absl::Now());
  if (!report.ok()) {
    std::cerr << "densegate report: " << report.status().message() << "\n";
    return kExitInfrastructure;
  }
  for (const std::string& f : formats) {
    const std::string path = a.out + "/report." + f;
    std::ofstream file(path);
    file << results::RenderReportFile(*report, f);
    if (!file) {
      std::cerr << "densegate report: cannot write " << path << "\n";
      return kExitInfrastructure;
    }
    std::cout << path << "\n";
  }
  return kExitAccept;
}

}  // namespace

void AddReportCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "report",
      "Write the regression report of a branch from the store: headline speedups, landed "
      "commits, every candidate, rejections by reason, change points, node health.");
  auto args = std::make_shared<ReportArgs>();
  AddDbFlag(cmd, &args->db);
  cmd->add_option("--repo", args->repo, "Repository as submitted (default: all)");
  cmd->add_option("--branch", args->branch, "Target branch (default: all)");
  cmd->add_option("--since", args->since, "YYYY-MM-DD or RFC 3339 (default: all time)");
  cmd->add_option("--out", args->out, "Directory for report.<format>")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--format", args->formats, "Comma-separated: html, md, json")
      ->capture_default_str();
  cmd->callback([args, exit_code] { *exit_code = Report(*args); });
}

}  // namespace densegate::cli
