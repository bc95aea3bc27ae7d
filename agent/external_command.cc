// External command: any program (an LLM coding tool, a script) proposes
// the next experiment by changing a worktree of the tip (v1::ExternalCommand).
// It reads the last feedback and the campaign's history from files and
// writes its hypothesis and claims to a third; what it leaves changed or
// committed is the experiment.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "agent/proposer.h"
#include "nlohmann/json.hpp"

namespace densegate::agent {
namespace {

class ExternalCommand : public Proposer {
 public:
  ExternalCommand(v1::ExternalCommand spec, ProposerTools tools)
      : spec_(std::move(spec)), tools_(tools) {}

  std::string Name() const override { return "external command " + spec_.argv(0); }

  absl::StatusOr<Proposal> Next(const ProposalContext& ctx) override {
    int done = 0;
    for (const Experiment& e : *ctx.history) done += e.key.rfind("ext-", 0) == 0;
    const int max = spec_.max_proposals() > 0 ? spec_.max_proposals() : 10;
    if (done >= max) {
      return Proposal{.kind = Proposal::Kind::kDone,
                      .note = absl::StrCat("made its ", max, " proposals")};
    }
    // Beside the worktree, not in it: the files must not become the change.
    const std::string files = ctx.worktree + ".proposer";
    std::error_code error;
    std::filesystem::remove_all(files, error);
    if (!std::filesystem::create_directories(files, error) || error) {
      return absl::InternalError(absl::StrCat("cannot make ", files, ": ", error.message()));
    }
    std::ofstream(files + "/feedback.json") << ctx.last_feedback_json;
    std::ofstream(files + "/history.json") << ctx.history_json;
    platform::ProcessSpec p;
    p.argv.assign(spec_.argv().begin(), spec_.argv().end());
    p.working_dir = ctx.worktree;
    p.env = {{"DENSEGATE_FEEDBACK", files + "/feedback.json"},
             {"DENSEGATE_HISTORY", files + "/history.json"},
             {"DENSEGATE_PROPOSAL", files + "/proposal.json"},
             {"DENSEGATE_TIP", ctx.tip},
             {"DENSEGATE_GOAL_METRIC", ctx.campaign->goal().metric()}};
    p.stdout_path = files + "/stdout";
    p.stderr_path = files + "/stderr";
    p.wall_timeout = absl::Seconds(spec_.timeout_s() > 0 ? spec_.timeout_s() : 600);
    // The operator's own tool (it may call a model's API): not sandboxed.
    p.isolate_network = false;
    absl::StatusOr<platform::ProcessResult> ran = tools_.launcher->Run(p);
    if (!ran.ok()) return ran.status();
    if (!ran->ok()) {
      return Proposal{.kind = Proposal::Kind::kDone,
                      .note = absl::StrCat(spec_.argv(0), " ", ran->Describe(), " (its stderr: ",
                                           files, "/stderr)")};
    }
    absl::StatusOr<std::string> status = tools_.git->Run(ctx.worktree, {"status", "--porcelain"});
    absl::StatusOr<std::string> head = tools_.git->Run(ctx.worktree, {"rev-parse", "HEAD"});
    if (!status.ok()) return status.status();
    if (!head.ok()) return head.status();
    if (status->empty() && absl::StripAsciiWhitespace(*head) == ctx.tip) {
      return Proposal{.kind = Proposal::Kind::kDone, .note = spec_.argv(0) + " changed nothing"};
    }
    Proposal out{.key = absl::StrCat("ext-", done + 1)};
    std::ifstream in(files + "/proposal.json");
    if (in) {
      try {
        const nlohmann::json j = nlohmann::json::parse(in);
        out.hypothesis = j.value("hypothesis", "");
        for (const nlohmann::json& c : j.value("claims", nlohmann::json::array())) {
          v1::Claim claim;
          claim.set_metric(c.at("metric").get<std::string>());
          claim.set_min_speedup(c.at("min_speedup").get<double>());
          out.claims.push_back(claim);
        }
      } catch (const nlohmann::json::exception& e) {
        return Proposal{.kind = Proposal::Kind::kDone,
                        .note = absl::StrCat(files, "/proposal.json: ", e.what())};
      }
    }
    if (out.hypothesis.empty()) out.hypothesis = spec_.argv(0) + "'s proposal " + out.key;
    return out;
  }

 private:
  v1::ExternalCommand spec_;
  ProposerTools tools_;
};

}  // namespace

std::unique_ptr<Proposer> NewExternalCommand(const v1::ExternalCommand& spec,
                                             ProposerTools tools) {
  return std::make_unique<ExternalCommand>(spec, tools);
}

}  // namespace densegate::agent
