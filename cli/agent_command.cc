// `densegate agent run CAMPAIGN.json | --resume ID` and `densegate agent log
// ID`: the experiment agent's campaigns (agent/campaign_runner.h) through
// the scheduler's API. Exit codes: 0 when the campaign's measured gain
// verified its goal, 1 when it ended short of it, 2 for a bad campaign
// file, 4 when the scheduler or git failed.
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/campaign_runner.h"
#include "cli/client_flags.h"
#include "cli/command.h"
#include "manifest/campaign_spec.h"
#include "platform/git/git.h"
#include "platform/process/launcher.h"

namespace densegate::cli {
namespace {

struct AgentArgs {
  ClientArgs client;
  std::string file;
  std::string resume;
  std::string workdir;
  std::string id;  // agent log
};

std::unique_ptr<agent::GrpcExperimentService> Service(const ClientArgs& a) {
  return std::make_unique<agent::GrpcExperimentService>(
      Stub(a), [&a](grpc::ClientContext* ctx) { Attach(a, ctx, /*deadline_s=*/120); });
}

// Reported and mapped to an exit code as every client command's (Fail).
int Failed(const std::string& what, const absl::Status& s) {
  return Fail(("agent " + what).c_str(),
              grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message())));
}

// Paths of the agent's machine in the file are relative to the file.
void ResolvePaths(v1::Campaign* c, const std::string& file) {
  const std::string dir = file.find('/') == std::string::npos ? "." : file.substr(0, file.rfind('/'));
  char cwd[4096] = {};
  const std::string base = dir.front() == '/' ? dir : std::string(getcwd(cwd, sizeof cwd)) + "/" + dir;
  for (v1::Proposer& p : *c->mutable_proposers()) {
    if (p.has_patch_catalog() && p.patch_catalog().dir().front() != '/') {
      p.mutable_patch_catalog()->set_dir(base + "/" + p.patch_catalog().dir());
    }
  }
  if (!c->repo().empty() && c->repo().front() == '.') c->set_repo(base + "/" + c->repo());
}

int Run(const AgentArgs& a) {
  if (a.file.empty() == a.resume.empty()) {
    std::cerr << "densegate agent run: give a campaign file or --resume ID (one of them)\n";
    return kExitUsage;
  }
  std::unique_ptr<agent::GrpcExperimentService> service = Service(a.client);
  absl::StatusOr<v1::Campaign> campaign;
  if (!a.file.empty()) {
    std::ifstream in(a.file);
    if (!in) {
      std::cerr << "densegate agent run: cannot read " << a.file << "\n";
      return kExitUsage;
    }
    std::stringstream text;
    text << in.rdbuf();
    absl::StatusOr<v1::Campaign> parsed = ParseCampaign(text.str());
    if (!parsed.ok()) return Failed("run: " + a.file, parsed.status());
    ResolvePaths(&*parsed, a.file);
    campaign = service->CreateCampaign(*parsed);
  } else {
    campaign = service->GetCampaign(a.resume);
  }
  if (!campaign.ok()) return Failed("run", campaign.status());
  std::unique_ptr<platform::ProcessLauncher> launcher = platform::NewSandboxLauncher();
  platform::Git git(launcher.get());
  agent::CampaignRun run;
  run.workdir = a.workdir.empty()
                    ? absl::StrCat(getenv("HOME") ? getenv("HOME") : "/tmp",
                                   "/.cache/densegate/agent/", campaign->id())
                    : a.workdir;
  run.tools = {&git, launcher.get()};
  run.log = [](const std::string& line) {
    std::cerr << absl::FormatTime("%H:%M:%S ", absl::Now(), absl::LocalTimeZone()) << line
              << "\n";
  };
  std::cerr << "densegate agent: campaign " << campaign->id() << " from "
            << campaign->start_sha().substr(0, 12) << ", workdir " << run.workdir << "\n";
  absl::StatusOr<agent::CampaignOutcome> out = agent::RunCampaign(*campaign, service.get(), run);
  if (!out.ok()) return Failed("run", out.status());
  if (a.client.json) {
    std::cout << agent::HistoryJson(*campaign, out->history).dump(2) << "\n";
  } else {
    std::cout << agent::HistoryText(*campaign, out->history);
    std::cout << "\nstopped: " << out->stopped << "\n";
  }
  return out->goal_reached ? kExitAccept : kExitReject;
}

int Log(const AgentArgs& a) {
  std::unique_ptr<agent::GrpcExperimentService> service = Service(a.client);
  absl::StatusOr<v1::Campaign> campaign = service->GetCampaign(a.id);
  if (!campaign.ok()) return Failed("log", campaign.status());
  absl::StatusOr<std::vector<v1::Evaluation>> all = service->ListCampaign(a.id);
  if (!all.ok()) return Failed("log", all.status());
  const std::vector<agent::Experiment> history = agent::HistoryOf(a.id, *all);
  if (a.client.json) {
    std::cout << agent::HistoryJson(*campaign, history).dump(2) << "\n";
  } else {
    std::cout << agent::HistoryText(*campaign, history);
  }
  return 0;
}

}  // namespace

void AddAgentCommand(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<AgentArgs>();
  CLI::App* agent = app.add_subcommand(
      "agent", "The experiment agent: campaigns of experiments toward a goal (agent/README.md).");
  agent->require_subcommand(1);
  CLI::App* run = agent->add_subcommand(
      "run", "Run a campaign (CAMPAIGN.json), or resume one (--resume ID) where it stopped.");
  AddClientFlags(run, &args->client);
  run->add_option("campaign", args->file, "the campaign file (v1::Campaign as JSON)");
  run->add_option("--resume", args->resume, "a campaign's id: go on from what the store holds");
  run->add_option("--workdir", args->workdir,
                  "the agent's clone of the repository (default ~/.cache/densegate/agent/ID)");
  run->callback([args, exit_code] { *exit_code = Run(*args); });
  CLI::App* log = agent->add_subcommand(
      "log", "A campaign's history: hypothesis, change, claim, measured interval, decision, why.");
  AddClientFlags(log, &args->client);
  log->add_option("id", args->id, "campaign id")->required();
  log->callback([args, exit_code] { *exit_code = Log(*args); });
}

}  // namespace densegate::cli
