// `densegate eval`: evaluate one candidate commit against its baseline on
// this machine, the way a node does, and print the verdict.
#include <filesystem>
#include <iostream>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "cli/build_info.h"
#include "cli/command.h"
#include "cli/sandbox_flags.h"
#include "cli/terminal_progress.h"
#include "harness/evaluator.h"
#include "harness/feedback.h"
#include "harness/process/machine_probe.h"
#include "results/report/report.h"

namespace densegate::cli {
namespace {

struct EvalArgs {
  std::string repo = ".";
  std::string baseline, candidate;
  std::string policy = "gain";
  std::vector<std::string> claims;
  std::string out;
  std::string workspace;
  int64_t min_free_mb = 256;
  bool json = false;
  bool override_protected = false;
  std::string override_reason;
  std::string precision_change;
  SandboxFlags sandbox;
};

absl::StatusOr<v1::Claim> ParseClaim(const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ">=");
  double value;
  if (parts.size() != 2 || parts[0].empty() ||
      !absl::SimpleAtod(absl::StripSuffix(parts[1], "x"), &value) || value <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--claim \"%s\": expected METRIC>=SPEEDUP, e.g. kda_decode.fused_b32>=1.7", text));
  }
  v1::Claim c;
  c.set_metric(parts[0]);
  c.set_min_speedup(value);
  return c;
}

void PrintHuman(const v1::Verdict& v) {
  std::cout << "decision: " << absl::AsciiStrToLower(v1::Decision_Name(v.decision())) << "\n";
  for (const auto& m : v.metrics()) {
    std::cout << absl::StrFormat("  %-28s %s", m.metric(), results::SpeedupText(m));
    if (!m.inputs_identical()) {
      std::cout << absl::StrFormat("  (%g -> %g %s)", m.baseline(), m.candidate(), m.unit());
    }
    std::cout << "\n";
  }
  for (const auto& r : v.reasons()) std::cout << "  - " << r.message() << "\n";
}

int Eval(const EvalArgs& args) {
  harness::EvalRequest request;
  request.repo = args.repo;
  request.baseline_ref = args.baseline;
  request.candidate_ref = args.candidate;
  if (args.policy == "gain") {
    request.policy = v1::GAIN;
  } else if (args.policy == "no-regression") {
    request.policy = v1::NO_REGRESSION;
  } else {
    std::cerr << "densegate eval: --policy must be gain or no-regression, got \""
              << args.policy << "\"\n";
    return kExitUsage;
  }
  for (const std::string& text : args.claims) {
    absl::StatusOr<v1::Claim> c = ParseClaim(text);
    if (!c.ok()) {
      std::cerr << "densegate eval: " << c.status().message() << "\n";
      return kExitUsage;
    }
    request.claims.push_back(*c);
  }
  request.protected_path_override = args.override_protected;
  request.override_reason = args.override_reason;
  request.precision_change = args.precision_change;
  request.out_dir = args.out;
  if (!args.out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(args.out, ec);
    if (ec) {
      std::cerr << "densegate eval: cannot create --out directory " << args.out << ": "
                << ec.message() << "\n";
      return kExitUsage;
    }
  }
  request.seed = std::random_device{}();

  harness::EvaluatorOptions options;
  options.workspace_root = args.workspace;
  options.min_free_bytes = args.min_free_mb << 20;
  options.software_version = absl::StrCat(kVersion, "+", kGitCommit);
  std::unique_ptr<harness::MachineProbe> probe = harness::NewCacheSweepProbe({});
  options.machine_probe = probe.get();
  options.sandbox_uid = args.sandbox.sandbox_uid;
  options.candidate_uid = args.sandbox.candidate_uid;
  options.arm_disk_quota_bytes = args.sandbox.arm_disk_quota_mib << 20;
  options.arm_max_processes = args.sandbox.arm_max_processes;
  options.isolation = Isolation(args.sandbox);
  absl::StatusOr<std::unique_ptr<platform::ProcessLauncher>> launcher =
      NewArmLauncher(args.sandbox, "eval");
  if (!launcher.ok()) {
    std::cerr << "densegate eval: " << launcher.status().message() << "\n";
    return kExitInfrastructure;
  }
  harness::Evaluator evaluator(options, launcher->get());
  TerminalProgress progress;
  absl::StatusOr<harness::EvalOutcome> outcome = evaluator.Evaluate(request, &progress);
  if (!outcome.ok()) {
    std::cerr << "densegate eval: " << outcome.status().message() << "\n";
    return kExitUsage;
  }
  if (!outcome->infrastructure_error.ok()) {
    std::cerr << "densegate eval: infrastructure error, no verdict: "
              << outcome->infrastructure_error.message() << "\n";
    return kExitInfrastructure;
  }
  const v1::Verdict& v = outcome->verdict;
  if (args.json) {
    std::cout << harness::VerdictJson(v).dump(2) << "\n";
  } else {
    PrintHuman(v);
  }
  if (!args.out.empty()) std::cerr << "feedback bundle: " << args.out << "\n";
  switch (v.decision()) {
    case v1::ACCEPT: return kExitAccept;
    case v1::REJECT: return kExitReject;
    default: return kExitInconclusive;
  }
}

}  // namespace

void AddEvalCommand(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "eval",
      "Evaluate a candidate commit against its baseline on this machine: build, "
      "correctness, benchmarks (ABBA, sequential gate). Exit 0 accept, 1 reject, 2 "
      "usage/input error, 3 inconclusive, 4 infrastructure error.");
  auto args = std::make_shared<EvalArgs>();
  const char* home = std::getenv("HOME");
  args->workspace = absl::StrCat(home ? home : "/tmp", "/.cache/densegate/workspace");
  cmd->add_option("--repo", args->repo, "Repository path or URL")->capture_default_str();
  cmd->add_option("--baseline", args->baseline, "Baseline ref (its manifest is used)")
      ->required();
  cmd->add_option("--candidate", args->candidate, "Candidate ref")->required();
  cmd->add_option("--policy", args->policy, "gain or no-regression")->capture_default_str();
  cmd->add_option("--claim", args->claims, "METRIC>=SPEEDUP, repeatable");
  cmd->add_option("--out", args->out, "Write the feedback bundle to this directory");
  cmd->add_option("--workspace", args->workspace, "Worktrees and caches")
      ->capture_default_str();
  cmd->add_option("--min-free-mb", args->min_free_mb,
                  "Free space the workspace must keep; less is an infrastructure error")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", args->json, "Print the verdict as JSON");
  cmd->add_flag("--override-protected", args->override_protected,
                "Accept changes to protected paths (recorded in the verdict)");
  cmd->add_option("--override-reason", args->override_reason, "Why the override");
  cmd->add_option("--precision-change", args->precision_change,
                  "Declare a change of numerics (e.g. \"fp8 kv cache\"): serving outputs then "
                  "need only agree within the manifest's min_token_agreement");
  AddSandboxFlags(cmd, &args->sandbox);
  cmd->callback([args, exit_code] { *exit_code = Eval(*args); });
}

}  // namespace densegate::cli
