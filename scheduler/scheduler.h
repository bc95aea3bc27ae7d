// Scheduler: the two gRPC services of proto/densegate.proto over one Store.
//
//   * Densegate (clients: CI, the agent, viewers): Submit resolves the refs
//     and reads the manifest from the baseline commit, then queues the
//     candidate (deduplicated by content hash); Get/List/Cancel/Watch read
//     and change the store; ListNodes shows node health.
//   * NodeService (role node): nodes register, long-poll for a lease
//     (Synchronize), heartbeat (the reply can cancel), stream stage events,
//     progress and samples, upload the evaluation's feedback bundle, and
//     finish the lease with a verdict, an infrastructure error (retried
//     elsewhere) or calibration noise. Clients read bundles with
//     GetFeedback (or GET /feedback).
//
// An ACCEPTed candidate that names a target branch goes to the merge queue
// (merge_queue.h), which lands it only as measured against the branch tip.
//
// Queue semantics (priorities, dimension matching, dedup, leases, retries,
// exactly-once verdicts) live in the store (results/store/README.md); the
// scheduler adds authorization, per-submitter limits, calibration and
// quarantine of nodes, long polls, and live progress (kept in memory: it is
// not durable and not replayed).
//
// Thread-safe: gRPC calls arrive on many threads.
#ifndef DENSEGATE_SCHEDULER_SCHEDULER_H_
#define DENSEGATE_SCHEDULER_SCHEDULER_H_

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "platform/process/launcher.h"
#include "platform/git/git.h"
#include "proto/densegate.grpc.pb.h"
#include "results/store/store.h"
#include "scheduler/auth.h"
#include "scheduler/http_server.h"
#include "scheduler/merge_queue.h"

namespace densegate::scheduler {

struct SchedulerOptions {
  absl::Duration lease_duration = absl::Seconds(60);
  int heartbeat_interval_s = 10;
  // Longest a Synchronize call is held when there is no work.
  absl::Duration max_sync_wait = absl::Seconds(30);
  int max_attempts = 3;
  // Coefficient of variation above which a calibrated node is quarantined.
  double max_calibration_noise = 0.05;
  // A quarantined node is recalibrated at most this often.
  absl::Duration recalibration_interval = absl::Seconds(60);
  // An active node runs its A/A calibration again this long after the last
  // one (counted from this process's start for nodes it has not seen
  // calibrate), before its next gate job.
  absl::Duration calibration_period = absl::Hours(6);
  // QUEUED experiments one submitter may have at once (CI is not limited).
  int max_queued_experiments_per_submitter = 50;
  // Share of each repository's error budget kept for one second part of an
  // evaluation that noise leaves inconclusive (results::PartParameters):
  // taken from the first part's later looks, so less than 3/8. 0: no second
  // parts, the whole budget.
  double second_part_share = 0.1;
  // A second part goes to a node of the first part's kind calibrated at or
  // under this noise (or the repository's limit, if stricter); a noisier
  // node recalibrates while it waits and takes it once calm.
  double second_part_max_node_noise = 0.015;
  // Feedback bundles: the cap on one (nodes are told at registration) and
  // how many per branch keep their files (docs/feedback.md).
  results::FeedbackPolicy feedback;
  // Branches an agent token may aim its experiments at (policy GAIN only,
  // landing through the merge queue like any other); none by default.
  std::vector<std::string> agent_branches;
  // Branches whose policy wants a person's approval before an experiment
  // lands (MergeState AWAITING_APPROVAL; `densegate approve` / `decline`).
  std::vector<std::string> approval_branches;
};

// What an evaluation the scheduler queues itself follows (empty: a
// submission). `remeasure_of`: the evaluation a merge-queue re-measure
// re-measures (Candidate.remeasure_of); `confirms`: the campaign experiment
// a confirmation measures afresh (Candidate.confirms); `first_part`: the
// evaluation a second part continues.
struct Lineage {
  std::string remeasure_of;
  std::string confirms;
  const v1::Evaluation* first_part = nullptr;
};

class Scheduler {
 public:
  // `store` and `launcher` (for git) are not owned and must outlive this.
  Scheduler(results::Store* store, Authenticator auth, platform::ProcessLauncher* launcher,
            SchedulerOptions options);
  ~Scheduler();

  grpc::Service* client_service();
  grpc::Service* node_service();

  // Requeues the jobs of expired leases; the server calls it periodically.
  void ReclaimExpiredLeases();
  // Advances the merge queue (merge_queue.h); the server calls it
  // periodically, and FinishLease when a verdict concerns it. One call at a
  // time (merges_mu_).
  void AdvanceMerges();
  // Prometheus text format: jobs by state, queued evaluations by kind,
  // nodes by state, and since start: dispatches, claim latency, lease
  // expiries, calibrations, verdicts by decision.
  std::string RenderMetrics();
  // The regression report (results/report) of a repository and branch
  // from the store, in the requested format (unspecified: HTML). The HTML
  // links each candidate's feedback at `feedback_link_prefix` + its id
  // when given (the report page's own /feedback).
  absl::StatusOr<v1::Report> RenderReport(const v1::GetReportRequest& request,
                                          const std::string& feedback_link_prefix = "");
  // GET /report: `format`, `repo`, `branch` from the query; a viewer token
  // (or any role) in the Authorization header or ?token=.
  HttpResponse ReportPage(const HttpRequest& request);
  // GET /feedback?evaluation=ID: the bundle's feedback.json; with
  // &file=PATH one of its files (text/plain, or JSON for .json); same
  // tokens as /report.
  HttpResponse FeedbackPage(const HttpRequest& request);
  // Ends long polls and watches promptly (server shutdown).
  void Shutdown();

 private:
  // The 401 or 403 for an HTTP page whose caller (?token= or the
  // Authorization header) may not read; nullopt when it may.
  std::optional<HttpResponse> DenyPage(const HttpRequest& request);

  class ClientService;
  class NodeServiceImpl;
  friend class ClientService;
  friend class NodeServiceImpl;
  // Defined beside each service (client_service.cc, node_service.cc).
  static std::unique_ptr<grpc::Service> NewClientService(Scheduler* s);
  static std::unique_ptr<grpc::Service> NewNodeService(Scheduler* s);

  // Resolves the refs, reads and validates the baseline's manifest, applies
  // the per-submitter experiment limit and queues the candidate (or finds
  // its twin). Authorization is the caller's.
  absl::StatusOr<results::SubmitResult> Enqueue(const v1::SubmitRequest& request,
                                                const std::string& submitter,
                                                const Lineage& lineage = Lineage());
  // For an evaluation that noise left inconclusive and that kept error
  // budget (results::ContinuationDue): queues its second part, once (the
  // same candidate identity deduplicates), and returns its id; "" when none
  // is due. Remembered in second_parts_ for GetEvaluation's continued_by.
  absl::StatusOr<std::string> ContinueIfDue(const v1::Evaluation& evaluation);
  // One claim for a registered node, without waiting: its calibration job
  // when one is due, else the next gate job its dimensions match. Empty when
  // nothing is queued for it, or it is quarantined.
  absl::StatusOr<std::optional<v1::Lease>> ClaimFor(const std::string& node_id);
  // Readies a claimed lease for node `node_id`: the heartbeat interval, the
  // node's calibration noise, what the verdict will need (granted_leases_),
  // and the prior measurement.
  void Grant(v1::Lease* lease, const std::string& node_id);
  // A re-measure's lease gets the digests and samples of the evaluation it
  // re-measures (v1::PriorMeasurement); the node decides whether they stand.
  void AttachPrior(v1::Lease* lease);
  // Queues the re-measurement (or, `confirmation`, the fresh confirming
  // measurement) the merge queue asks for; returns its id.
  absl::StatusOr<std::string> Remeasure(const v1::Evaluation& original,
                                        const std::string& tip_sha,
                                        const std::string& candidate_sha, bool confirmation);
  // Wakes long polls and watchers.
  void Notify();
  void RecordClaim(double seconds, size_t leases);
  // Whether a quarantined node may recalibrate now (and records it); never
  // for one whose verdict was contradicted.
  bool RecalibrationDue(const std::string& node_id);
  // Whether an active node noisier than some queued job's noise limit (a
  // repository's max_calibration_noise) should calibrate again now, on the
  // quarantine's schedule, so that it takes that work once calm.
  bool QuarantinedForSomeQueuedWork(const v1::Node& node);
  // Whether an active node's periodic calibration is due; `start`: and
  // records that it starts now.
  bool PeriodicCalibrationDue(const std::string& node_id, bool start);
  // A node token acts only as its own node (its principal is the node's
  // name); other roles that may call node methods (admin) act as any.
  // PERMISSION_DENIED, or the store's error for an unknown node id.
  grpc::Status CheckActsAs(const Principal& who, const std::string& node_id);
  // The verdict to store for the one a node reported: the gate run again
  // here over the samples it streamed under the lease (results::Redecide),
  // with the candidate's policy, claims and scope as submitted and the
  // baseline manifest's gate and metrics (read again from the repository,
  // checked against the hash stored at submit). Any difference is
  // audited; a node whose decision or claim results differ from the gate's,
  // or whose samples decide nothing, is quarantined. An error when nothing
  // can be stored (the lease then fails and the job is retried).
  absl::StatusOr<v1::Verdict> DecideHere(const results::LeaseRef& lease,
                                         const v1::Verdict& reported,
                                         const v1::Candidate* candidate);
  // Drops what this process keeps about a lease that ended without a verdict.
  void ForgetLease(const std::string& lease_id);
  // Live progress of the evaluation a lease works on.
  void RecordProgress(const std::string& lease_id, const v1::Progress& progress);
  // Waits until Notify or `deadline`; false once shut down.
  bool WaitForChange(absl::Time deadline);

  results::Store* store_;
  Authenticator auth_;
  platform::ProcessLauncher* launcher_;
  SchedulerOptions options_;
  platform::Git git_;
  MergeQueue merges_;
  std::mutex merges_mu_;       // Held by AdvanceMerges.
  bool merges_swept_ = false;  // Guarded by merges_mu_.
  std::unique_ptr<grpc::Service> client_;
  std::unique_ptr<grpc::Service> node_;

  // Counters since start (for /metrics).
  std::atomic<int64_t> dispatches_{0};
  std::atomic<int64_t> lease_expiries_{0};
  std::atomic<int64_t> calibrations_{0};
  std::atomic<int64_t> verdicts_[4] = {};  // By v1::Decision value.
  static constexpr double kLatencyBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                               0.05,  0.1,    0.25,  1.0};
  std::atomic<int64_t> claim_latency_buckets_[10] = {};  // Last: +Inf.
  std::atomic<int64_t> claim_latency_us_sum_{0};
  std::atomic<int64_t> claims_{0};

  absl::Mutex mu_;
  int64_t version_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Recent progress reports per evaluation id, while its lease runs. A
  // watcher relays each report once, also several that arrive between two
  // of its wake-ups (keeping only the latest lost the ones in between).
  struct ProgressLog {
    int64_t generation = 0;           // Tells a new lease's log from the last.
    int64_t recorded = 0;             // Reports ever recorded in this log.
    std::deque<v1::Progress> recent;  // The last kProgressKept of them.
  };
  static constexpr size_t kProgressKept = 64;
  std::map<std::string, ProgressLog> progress_ ABSL_GUARDED_BY(mu_);
  int64_t progress_logs_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, absl::Time> last_recalibration_ ABSL_GUARDED_BY(mu_);
  // The strictest repository noise limit submitted to this process (a
  // cheap test before asking the store which queued jobs a node misses).
  double strictest_noise_limit_ ABSL_GUARDED_BY(mu_) = 1e9;
  // First part -> its second part, as queued or found by ContinueIfDue.
  std::map<std::string, std::string> second_parts_ ABSL_GUARDED_BY(mu_);
  // Each node's latest calibration noise as this process last read or
  // recorded it (for its leases: v1::Lease::node_calibration_noise).
  std::map<std::string, double> node_noise_ ABSL_GUARDED_BY(mu_);
  // Nodes with a feedback upload in progress: one at a time each, so that
  // a node holds at most one bundle's worth of the scheduler's memory.
  std::set<std::string> uploading_ ABSL_GUARDED_BY(mu_);
  // When each node last finished (or, unseen, was first asked about) a
  // calibration.
  std::map<std::string, absl::Time> last_calibration_ ABSL_GUARDED_BY(mu_);
  // An EVALUATION lease this process handed out, until it ends here: its
  // evaluation, and the store ids of the samples streamed under it (the
  // verdict names exactly those).
  struct GrantedLease {
    std::string evaluation_id;
    v1::Candidate candidate;  // As submitted: its policy and claims decide.
    std::vector<int64_t> sample_ids;
    // Its verdict moves the merge queue: the candidate targets a branch, or
    // re-measures one that does.
    bool merge_queue = false;
  };
  std::map<std::string, GrantedLease> granted_leases_ ABSL_GUARDED_BY(mu_);
  // Node id -> name, for CheckActsAs.
  std::map<std::string, std::string> node_names_ ABSL_GUARDED_BY(mu_);
};

// absl::Status -> grpc::Status with the same code and message.
grpc::Status ToGrpc(const absl::Status& s);

}  // namespace densegate::scheduler

#endif  // DENSEGATE_SCHEDULER_SCHEDULER_H_
