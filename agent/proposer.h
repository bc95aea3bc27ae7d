// Proposers: where a campaign's experiments come from. One interface, one
// strategy per file: knob search (knob_search.cc), a patch catalog
// (patch_catalog.cc) and any external command (external_command.cc), each
// described in densegate.proto (v1::Proposer).
//
// A proposer is a function of the campaign's history: given the
// experiments already run (their keys and evaluations), it names the next
// one by a key the history does not hold and makes its change in a
// worktree checked out at the branch's tip. That is what lets a killed
// campaign resume without repeating a finished experiment.
//
// Thread-safety: a proposer is used by one campaign run, on one thread.
#ifndef DENSEGATE_AGENT_PROPOSER_H_
#define DENSEGATE_AGENT_PROPOSER_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "platform/git/git.h"
#include "platform/process/launcher.h"
#include "proto/densegate.pb.h"

namespace densegate::agent {

// An experiment of the campaign: the key its proposer gave it and its
// evaluation as the scheduler last reported it.
struct Experiment {
  std::string key;
  v1::Evaluation evaluation;
  // The merge queue's fresh evaluation of it, when it was accepted toward
  // the branch (Candidate.confirms): what a landing's speedup is taken from.
  std::optional<v1::Evaluation> confirmation;
};

struct ProposalContext {
  const v1::Campaign* campaign = nullptr;
  std::string tip;  // Full sha of the branch's tip.
  // Oldest first, every experiment so far (unfinished ones included).
  const std::vector<Experiment>* history = nullptr;
  // A clean checkout of `tip` on a branch of its own: changes go here,
  // left in the files or committed.
  std::string worktree;
  // The last finished experiment's feedback.json ("" before the first).
  std::string last_feedback_json;
  // The history as `densegate agent log --json` prints it.
  std::string history_json;
};

struct Proposal {
  enum class Kind {
    kExperiment,  // Submit it.
    kSkipped,     // Nothing to submit this time (`note` says why); ask again.
    kDone,        // This proposer has nothing more (`note` says why).
  };
  Kind kind = Kind::kExperiment;
  // Unique within the campaign; lowercase letters, digits, '.', '_', '=',
  // '-'. It names the experiment's branch.
  std::string key;
  std::string hypothesis;
  std::vector<v1::Claim> claims;
  // Measured only: scoped to the goal's metric and not aimed at the
  // branch (a knob search's first rung).
  bool screen = false;
  std::string note;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string Name() const = 0;
  virtual absl::StatusOr<Proposal> Next(const ProposalContext& context) = 0;
};

// The tools proposers use; not owned.
struct ProposerTools {
  platform::Git* git = nullptr;
  platform::ProcessLauncher* launcher = nullptr;
};

std::unique_ptr<Proposer> NewKnobSearch(const v1::KnobSearch& spec, ProposerTools tools);
std::unique_ptr<Proposer> NewPatchCatalog(const v1::PatchCatalog& spec, ProposerTools tools);
std::unique_ptr<Proposer> NewExternalCommand(const v1::ExternalCommand& spec,
                                             ProposerTools tools);
// The one `spec` describes.
std::unique_ptr<Proposer> NewProposer(const v1::Proposer& spec, ProposerTools tools);

// `text` made fit for a key: lowercase, other characters '_', at most 80.
std::string KeyPart(std::string_view text);
// Whether the history holds an experiment with `key`.
bool HasKey(const std::vector<Experiment>& history, std::string_view key);
// The goal metric's comparison in the evaluation's verdict, or nullptr.
const v1::MetricComparison* GoalComparison(const v1::Evaluation& e, std::string_view metric);

}  // namespace densegate::agent

#endif  // DENSEGATE_AGENT_PROPOSER_H_
