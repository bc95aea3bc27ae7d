// The demo's run, shared by its parts: demo.cc (scenario, services,
// submissions, report), live_view.cc (following each candidate and drawing
// the live view) and outcome.cc (verdicts, bisection, host state). Private
// to demo/.
//
// Thread-safety: Demo's rows_ are guarded by mu_ once the watchers run;
// the rest is used from the thread that runs the demo.
#ifndef DENSEGATE_DEMO_INTERNAL_DEMO_RUN_H_
#define DENSEGATE_DEMO_INTERNAL_DEMO_RUN_H_

#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "demo/demo.h"
#include "demo/scenario.h"
#include "demo/scratch_repo.h"
#include "platform/process/service_process.h"
#include "platform/git/git.h"
#include "platform/process/launcher.h"
#include "proto/densegate.grpc.pb.h"

namespace densegate::demo::internal {

constexpr int kExitMismatch = 1, kExitUsage = 2, kExitInfrastructure = 4;

struct Tokens {
  std::string ci, agent, viewer, admin;
  std::map<std::string, std::string> nodes;  // By node name.
};

// The CPUs this process may use, split in two halves, one per node. With a
// single CPU both nodes share it (and the demo says so).
std::pair<std::vector<int>, std::vector<int>> SplitCpus();

// What the live view shows of one candidate.
struct Row {
  const ScenarioCandidate* candidate = nullptr;
  std::string id;
  // The evaluation the live view follows: the candidate's, then the merge
  // queue's re-measure of it, which may run on the other node.
  std::string watched_id;
  v1::EvaluationState state = v1::QUEUED;
  std::string node_id;              // Where watched_id runs.
  std::string activity = "queued";  // Stage and repetitions, or the outcome.
  // Activities set since the live view last drew: a log (no terminal)
  // prints each, also those replaced within the view's one-second redraw.
  std::vector<std::string> unshown;
  void SetActivity(std::string a) {
    unshown.push_back(a);
    activity = std::move(a);
  }
  bool settled = false;             // Final, merge included.
  v1::Evaluation final;
  // The merge queue's re-measure against the moved tip, when it ran.
  std::optional<v1::Evaluation> remeasure;
};

class Demo {
 public:
  Demo(const DemoOptions& options, std::ostream& out) : o_(options), out_(out) {}
  int Run();

 private:
  absl::Status Prepare();
  absl::Status StartServices();
  void SeedTrustedCache(const std::string& shared);
  absl::Status StartNode(size_t i);  // Starts node_specs_[i].
  absl::Status AwaitNodes();
  absl::Status SubmitAll();
  void Follow(Row* row);
  void FollowEvents(Row* row, const std::string& id, const std::string& prefix);
  absl::StatusOr<v1::Evaluation> Get(const std::string& id);
  bool WaitAndShow();
  void Show(bool final);
  std::string NodeName(const std::string& id);
  int Verdicts();
  // Prints the host state the run measured in: the machine probe's range,
  // the pairs measured again or kept unsteady and the waits (from every
  // verdict's Provenance.host), and each node's state and calibration
  // noise, with the quarantines seen. A reader can then tell a noisy run
  // from a regression.
  void HostState();
  // Starts `densegate bisect` over the scenario's bisection branch through
  // the scheduler, as a user would, once every candidate is decided: its
  // jobs then take the nodes that the merge queue's serial re-measures leave
  // idle (started with the candidates, its CI-class jobs would go ahead of
  // the experiments). Does nothing when started already or the scenario has
  // no bisection.
  void StartBisect();
  // Waits for the bisection and prints its steps. True when it names the
  // expected culprit (or the scenario has no bisection).
  bool FinishBisect();
  absl::Status WriteReport();

  template <typename Ctx>
  void Attach(Ctx* ctx, const std::string& token, int deadline_s = 30) {
    ctx->AddMetadata("authorization", "Bearer " + token);
    if (deadline_s > 0) {
      ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_s));
    }
  }

  const DemoOptions& o_;
  std::ostream& out_;
  const absl::Time start_ = absl::Now();
  std::unique_ptr<platform::ProcessLauncher> launcher_ = platform::NewSandboxLauncher();
  platform::Git git_{launcher_.get()};
  Scenario scenario_;
  ScratchRepo repo_;
  Tokens tokens_;
  std::string db_url_;
  std::unique_ptr<platform::ServiceProcess> scheduler_;
  struct NodeSpec {
    std::string name;
    std::vector<int> cpus;
    std::vector<std::string> argv;
  };
  std::vector<NodeSpec> node_specs_;
  std::vector<std::unique_ptr<platform::ServiceProcess>> nodes_;  // One per spec.
  std::string address_;
  int http_port_ = 0;
  std::unique_ptr<v1::Densegate::Stub> stub_;

  // Set when the demo gives up: watchers stop polling a stopped scheduler.
  std::atomic<bool> giving_up_{false};
  int inconclusive_ = 0;  // Misses allowed by allow_inconclusive.
  // Node name -> the calibration noise of each quarantine seen.
  std::map<std::string, std::vector<double>> quarantines_;
  // The target repository's max_calibration_noise (0: none): a node above
  // it gets none of its gate work.
  double repo_noise_limit_ = 0;
  // Why node `n` gets none of the repository's gate work, or "".
  std::string OverRepoLimit(const v1::Node& n) const {
    if (repo_noise_limit_ <= 0 || n.calibration_noise() <= repo_noise_limit_) return "";
    return absl::StrFormat(
        " (over the repository's max_calibration_noise %.2f%%: quarantined for its gate work, "
        "which goes to calmer nodes, until it calibrates calm)",
        100 * repo_noise_limit_);
  }
  std::mutex mu_;
  std::vector<std::unique_ptr<Row>> rows_;  // Guarded by mu_ once watchers run.
  // Node id -> name, of every registration AwaitNodes saw (no node joins later).
  std::map<std::string, std::string> node_names_;
  // The bisection's process, run on its own thread from StartBisect.
  std::thread bisect_;
  platform::ProcessSpec bisect_spec_;
  absl::StatusOr<platform::ProcessResult> bisect_result_ = absl::UnknownError("not started");
  std::string bisect_started_at_, bisect_finished_at_;
  int shown_lines_ = 0;
  std::map<const Row*, std::string> last_printed_;
  const bool tty_ = isatty(STDOUT_FILENO);
};


// "M:SS" since `start`, as the live view prints it.
std::string Elapsed(absl::Time start);
// "precision", "end-to-end": a stage kind as the live view names it.
std::string StageName(v1::StageKind k);
// "accept", "reject (gaming)": an evaluation's outcome in a word or two.
std::string DecisionText(const v1::Evaluation& e);
// Each metric of a verdict with its speedup and interval.
std::string Metrics(const v1::Verdict& v);

}  // namespace densegate::demo::internal

#endif  // DENSEGATE_DEMO_INTERNAL_DEMO_RUN_H_
