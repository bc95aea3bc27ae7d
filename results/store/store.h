// Store: the durable state of densegate, behind one interface.
//
// What it holds: repositories, candidates (unique by content hash, which is
// how duplicate submissions are found), evaluations, the job queue and its
// leases, stage records, raw samples (append-only: there is no call that
// updates or deletes one, and the database rejects it with a trigger),
// verdicts with everything they were computed from, metric comparisons,
// nodes, the merge queue, an audit log, and the evaluations' feedback
// bundles (compressed; a retention rule per branch drops old files). See results/store/README.md for the
// schema and the queue's semantics.
//
// Two backends implement it with the same contract (one test suite runs
// against both): SQLite, the embedded default (one file, WAL), and
// PostgreSQL through libpqxx for production (several scheduler replicas;
// claims use FOR UPDATE SKIP LOCKED). OpenStore() picks one from a URL.
//
// Errors: every call returns absl::Status; nothing throws. Bad input is
// InvalidArgument, a missing row NotFound, a call that does not fit the
// current state (finishing an expired lease, cancelling a finished
// evaluation) FailedPrecondition, a duplicate AlreadyExists. Every call is
// atomic (one transaction, or one statement), so a failed call has written
// nothing.
// Unavailable means the database could not be reached or the connection was
// lost: retry it (the store reconnects on a later call). Aborted (a
// deadlock the database broke) may also be retried.
//
// Thread-safety: a Store is safe to use from many threads at once. Several
// Store objects (threads, processes, scheduler replicas) may share one
// database; the queue operations are safe under that concurrency.
#ifndef DENSEGATE_RESULTS_STORE_STORE_H_
#define DENSEGATE_RESULTS_STORE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/densegate.pb.h"
#include "results/feedback/bundle.h"
#include "results/store/clock.h"

namespace densegate::results {

// What a job asks of the node that runs it. Empty or zero fields match any
// node.
struct JobRequirements {
  // NodeDimensions.accelerator_kind must equal this, e.g. "nvidia-h200".
  std::string accelerator_kind;
  int32_t min_accelerator_count = 0;
  int64_t min_accelerator_memory_bytes = 0;
  // Only nodes with this fingerprint (comparable samples).
  std::string fingerprint;
  // Only this node (calibration jobs are pinned to their node).
  std::string node_id;
  // Only nodes whose last A/A calibration noise (Node.calibration_noise) is
  // at most this: the repository's max_calibration_noise where it is
  // stricter than the scheduler's. 0: any active node.
  double max_node_noise = 0;
};

// The policy a candidate is judged under: `policy`, or when UNSPECIFIED the
// kind's default (NO_REGRESSION for CI, GAIN for experiments).
inline v1::Policy EffectivePolicy(v1::Policy policy, v1::CandidateKind kind) {
  if (policy != v1::POLICY_UNSPECIFIED) return policy;
  return kind == v1::CI ? v1::NO_REGRESSION : v1::GAIN;
}

struct SubmitParams {
  // Required: id (the content hash of repo, baseline sha, candidate sha and
  // manifest hash), repo, baseline_sha, candidate_sha, kind (CI or
  // EXPERIMENT) and submitter. policy UNSPECIFIED becomes EffectivePolicy's;
  // submitted_at unset becomes now.
  v1::Candidate candidate;
  // Higher runs first within the candidate's class; CI always precedes
  // experiments, and equal priorities run in submission order. A
  // merge-queue re-measure or confirmation (candidate.remeasure_of or
  // confirms set) ignores it: it runs before all other gate work, since
  // its branch waits for it.
  int32_t priority = 0;
  // Infrastructure failures (expired leases, FailLease) allowed before the
  // evaluation is DEAD. 0: StoreOptions::default_max_attempts.
  int32_t max_attempts = 0;
  JobRequirements requirements;
};

struct SubmitResult {
  v1::Evaluation evaluation;
  // True when the candidate (same id) was already submitted: `evaluation`
  // is its latest evaluation and nothing new was queued.
  bool deduplicated = false;
};

struct ClaimRequest {
  std::string node_id;
  // The claiming node's dimensions, matched against JobRequirements.
  v1::NodeDimensions dimensions;
  // Up to this many jobs in one transaction (batching); >= 1.
  int max_jobs = 1;
  // Lease lifetime from now; > 0. RenewLease extends it.
  absl::Duration lease_duration = absl::Seconds(60);
};

// Names a lease and the node that claims to hold it; every lease-guarded
// call checks both, and that the lease is still live.
struct LeaseRef {
  std::string lease_id;
  std::string node_id;
};

struct LeaseRenewal {
  // The node must stop the job and drop its results: the evaluation was
  // cancelled, or the lease expired (its job goes back to the queue).
  bool cancel = false;
  std::string cancel_reason;
  // The new expiry when not cancelled.
  absl::Time expires_at = absl::InfinitePast();
};

struct ReclaimedLease {
  std::string lease_id;
  std::string node_id;
  // Empty for calibration jobs.
  std::string evaluation_id;
  int64_t job_id = 0;
  // Leases granted for the job so far.
  int32_t attempts = 0;
  // QUEUED (retried) or DEAD (attempts exhausted).
  v1::EvaluationState new_state = v1::EVALUATION_STATE_UNSPECIFIED;
};

// What FinishLeaseAndClaimNext found and claimed after writing the verdict.
struct NextClaim {
  // The lease's node as the call found it.
  v1::NodeState node_state = v1::NODE_STATE_UNSPECIFIED;
  // The node's next lease; empty when node_state is not ACTIVE or no queued
  // job matches the node's registered dimensions.
  std::optional<v1::Lease> lease;
};

struct QueueCounts {
  int64_t queued = 0;
  int64_t leased = 0;
  int64_t done = 0;
  int64_t cancelled = 0;
  int64_t dead = 0;
  // Queued jobs by what orders them and where they may run.
  struct Group {
    std::string job_class;  // "calibration", "ci" or "experiment"
    int32_t priority = 0;
    std::string accelerator_kind;  // required; empty: any node
    int64_t count = 0;
  };
  std::vector<Group> queued_by_group;
};

struct StageRecord {
  int64_t id = 0;
  std::string evaluation_id;
  std::string lease_id;
  int32_t attempt = 0;
  v1::Stage stage;
  absl::Time recorded_at = absl::InfinitePast();
};

struct MetricHistoryFilter {
  // At least one of metric and evaluation_id.
  std::string metric;
  std::string evaluation_id;
  // Repository URL; empty: all.
  std::string repo;
  absl::Time since = absl::InfinitePast();
  // 1 .. 10000.
  int limit = 1000;
};

struct MetricComparisonRecord {
  std::string evaluation_id;
  std::string candidate_id;
  std::string repo;
  v1::MetricComparison comparison;
  absl::Time decided_at = absl::InfinitePast();
};

struct MergeEntry {
  // Order in the queue (increasing).
  int64_t position = 0;
  std::string evaluation_id;
  std::string repo;
  std::string target_branch;
  v1::MergeStatus status;
  absl::Time created_at = absl::InfinitePast();
  absl::Time updated_at = absl::InfinitePast();
};

struct MergeQueueFilter {
  std::string repo;           // empty: all
  std::string target_branch;  // empty: all
  // Empty: MERGE_QUEUED and REMEASURING (the live queue).
  std::vector<v1::MergeState> states;
};

struct AuditEntry {
  int64_t id = 0;                        // assigned by the store
  absl::Time at = absl::InfinitePast();  // assigned by the store
  std::string actor;    // principal, e.g. "ci", "agent:campaign-7", "admin:ana"
  std::string action;   // e.g. "submit", "cancel", "merge.update"
  std::string subject;  // what it acted on, e.g. an evaluation id
  std::string detail;
};

// How FinishLeaseAndClaimNext calls were served since the store was opened.
// On PostgreSQL the calls that wait for a claim turn together share one
// statement, so leases / statements is how many nodes a statement served
// (what the claim limit trades against; docs/measurements/dispatch.md, "What
// bounds the pipeline"). SQLite serves each call in its own transaction and
// counts none.
struct FinishBatchCounts {
  int64_t statements = 0;  // statements sent, a batch or a single lease
  int64_t leases = 0;      // leases those statements carried
};

// What the store keeps of feedback bundles (docs/feedback.md).
struct FeedbackPolicy {
  // Largest bundle PutFeedback takes: its files' uncompressed bytes.
  int64_t max_bytes = kDefaultFeedbackMaxBytes;
  // Per repository and target branch (experiments, which target none,
  // share one per repository), the files of the newest `keep_per_branch`
  // bundles are kept; an older bundle keeps its summary (feedback.json)
  // and its list of files, and loses their contents. < 1: keep all.
  int keep_per_branch = 200;
};

// A stored feedback bundle.
struct FeedbackRecord {
  std::string evaluation_id;
  // The lease it was uploaded under.
  std::string lease_id;
  // feedback.json, kept for as long as the evaluation.
  std::string summary_json;
  // The files, when asked for and not yet dropped by the retention rule;
  // bundle.omitted always.
  v1::FeedbackBundle bundle;
  int32_t files = 0;
  // Uncompressed bytes of all files.
  int64_t bytes = 0;
  absl::Time recorded_at;
  // When the retention rule dropped the files; InfinitePast: kept.
  absl::Time files_dropped_at = absl::InfinitePast();
};

struct AuditFilter {
  std::string actor;    // empty: any
  std::string subject;  // empty: any
  absl::Time since = absl::InfinitePast();
  // Entries with id > after_id, oldest first (page with the last id seen).
  int64_t after_id = 0;
  int limit = 100;  // 1 .. 10000
};

class Store {
 public:
  virtual ~Store() = default;

  // ---- Schema ------------------------------------------------------------

  // "sqlite" or "postgresql".
  virtual absl::string_view backend() const = 0;
  // Applies the pending migrations (recorded in schema_migrations), all in
  // one transaction. Idempotent; safe to run from several processes at once.
  // FailedPrecondition when the database is newer than this binary.
  virtual absl::Status Migrate() = 0;
  // Highest applied migration; 0 for an empty database.
  virtual absl::StatusOr<int> SchemaVersion() = 0;

  // ---- Submissions and evaluations ---------------------------------------

  // Records the candidate, a QUEUED evaluation and its job, and an audit
  // entry; or returns the existing evaluation of the same candidate id.
  virtual absl::StatusOr<SubmitResult> Submit(const SubmitParams& params) = 0;
  // Candidate, state, node, attempt, latest stage record per stage kind,
  // verdict and merge status.
  virtual absl::StatusOr<v1::Evaluation> GetEvaluation(
      absl::string_view evaluation_id) = 0;
  // The latest evaluation of a candidate (content hash); NotFound if none.
  virtual absl::StatusOr<v1::Evaluation> FindByCandidate(
      absl::string_view candidate_id) = 0;
  // Newest first. Filters: states (any of), kind, repo (URL), since (created
  // at or after), submitter. page_size 0 means 50, at most 1000. Stages are
  // left out; verdict and merge status are included.
  virtual absl::StatusOr<v1::ListEvaluationsResponse> ListEvaluations(
      const v1::ListEvaluationsRequest& request) = 0;
  // QUEUED or RUNNING -> CANCELLED; an active lease is cancelled with it (its
  // node learns it from RenewLease). FailedPrecondition once the evaluation
  // has ended.
  virtual absl::StatusOr<v1::Evaluation> CancelEvaluation(
      absl::string_view evaluation_id, absl::string_view actor,
      absl::string_view reason) = 0;

  // ---- Queue and leases --------------------------------------------------

  // Queues an A/A calibration job pinned to `node_id` (registered). Runs
  // before CI and experiment work on that node. AlreadyExists while one is
  // queued or leased. Returns the job id.
  virtual absl::StatusOr<int64_t> EnqueueCalibration(absl::string_view node_id,
                                                     int32_t max_attempts) = 0;
  // QUEUED jobs that a node with calibration noise `noise` may not claim:
  // their JobRequirements::max_node_noise is below it.
  virtual absl::StatusOr<int64_t> CountQueuedOverNoiseLimit(double noise) = 0;
  // Leases up to max_jobs QUEUED jobs whose requirements the dimensions
  // meet: calibration first, then merge-queue re-measures, then CI, then
  // experiments; higher priority first within a class; then submission
  // order. Empty when nothing
  // matches. Each lease's evaluation is RUNNING with the new attempt number.
  virtual absl::StatusOr<std::vector<v1::Lease>> ClaimJobs(
      const ClaimRequest& request) = 0;
  // Heartbeat: extends a live lease to now + ttl and records the node's
  // heartbeat. Returns cancel=true (OK status) when the node must stop:
  // cancelled evaluation, or expired lease.
  virtual absl::StatusOr<LeaseRenewal> RenewLease(const LeaseRef& lease,
                                                  absl::Duration ttl) = 0;
  // Ends a live EVALUATION lease with its verdict: the verdict (with its
  // metric comparisons and the sample ids it was computed from) is written
  // once, the evaluation becomes FINISHED. FailedPrecondition (and nothing
  // written) if the lease was finished, expired, reclaimed, cancelled, or is
  // held by another node. Verdict fields evaluation_id and candidate_id may
  // be empty (filled in) but must match when set; provenance.sample_ids must
  // be samples of this evaluation.
  virtual absl::Status FinishLease(const LeaseRef& lease,
                                   const v1::Verdict& verdict) = 0;
  // FinishLease, then, when the lease's node is ACTIVE, one claim for it as
  // ClaimJobs with its registered dimensions and max_jobs 1 would make. A
  // failed finish claims nothing and returns FinishLease's error. On
  // PostgreSQL both are one statement, shared by the calls that wait for a
  // claim turn at the same time (one round trip for all of them;
  // results/store/README.md); on SQLite one write transaction.
  virtual absl::StatusOr<NextClaim> FinishLeaseAndClaimNext(
      const LeaseRef& lease, const v1::Verdict& verdict,
      absl::Duration lease_duration) = 0;
  // Totals since this store object was opened; cheap, any thread.
  virtual FinishBatchCounts finish_batch_counts() const = 0;
  // Ends a live CALIBRATION lease: records the node's noise and new state.
  virtual absl::Status FinishCalibration(const LeaseRef& lease,
                                         double calibration_noise,
                                         v1::NodeState new_state) = 0;
  // Infrastructure failure on a live lease: the job goes back to the queue,
  // or is DEAD when its attempts are exhausted. Returns QUEUED or DEAD.
  virtual absl::StatusOr<v1::EvaluationState> FailLease(
      const LeaseRef& lease, absl::string_view error) = 0;
  // Expires live leases whose expiry is at or before now (at most `limit`,
  // oldest first); each job is requeued or, attempts exhausted, DEAD.
  virtual absl::StatusOr<std::vector<ReclaimedLease>> ReclaimExpiredLeases(
      int limit) = 0;
  virtual absl::StatusOr<QueueCounts> CountJobs() = 0;

  // ---- Stages, samples, verdicts -----------------------------------------

  // Appends a stage record (kind and status set) under a live lease.
  virtual absl::Status RecordStage(const LeaseRef& lease,
                                   const v1::Stage& stage) = 0;
  // Every stage record of the evaluation, oldest first.
  virtual absl::StatusOr<std::vector<StageRecord>> ListStages(
      absl::string_view evaluation_id) = 0;
  // Appends samples under a live lease, all or none; returns their new ids
  // in input order. Each needs metric, arm, pair_index >= 0 and a finite
  // value; id must be 0 and evaluation_id empty or the lease's. AlreadyExists
  // if (metric, arm, pair_index) was already recorded under this lease.
  virtual absl::StatusOr<std::vector<int64_t>> AppendSamples(
      const LeaseRef& lease, absl::Span<const v1::Sample> samples) = 0;
  // The evaluation's samples, in id order.
  virtual absl::StatusOr<std::vector<v1::Sample>> ListSamples(
      absl::string_view evaluation_id) = 0;
  virtual absl::StatusOr<v1::Verdict> GetVerdict(
      absl::string_view evaluation_id) = 0;
  // Metric comparisons of verdicts, oldest decision first.
  virtual absl::StatusOr<std::vector<MetricComparisonRecord>>
  ListMetricComparisons(const MetricHistoryFilter& filter) = 0;

  // ---- Feedback bundles ----------------------------------------------------

  // Stores the bundle of the live lease's evaluation, replacing one that an
  // earlier upload (this lease's, or an earlier attempt's) left, then
  // applies `policy`'s retention rule to the evaluation's branch. Each
  // file's path must be relative and '/'-separated without "." or ".."
  // components, each path once; `summary_json` is the bundle's
  // feedback.json. ResourceExhausted when the files exceed
  // policy.max_bytes (nothing written).
  virtual absl::Status PutFeedback(const LeaseRef& lease,
                                   const v1::FeedbackBundle& bundle,
                                   absl::string_view summary_json,
                                   const FeedbackPolicy& policy) = 0;
  // The evaluation's bundle; its files only `with_files`. NotFound when the
  // evaluation has none (yet).
  virtual absl::StatusOr<FeedbackRecord> GetFeedback(
      absl::string_view evaluation_id, bool with_files) = 0;

  // ---- Campaigns -----------------------------------------------------------

  // Records `campaign` (id, owner, start_sha and created_at set by the
  // caller). The same campaign again (its spec byte for byte) returns the
  // stored one; another with that id is AlreadyExists.
  virtual absl::StatusOr<v1::Campaign> PutCampaign(const v1::Campaign& campaign) = 0;
  // NotFound when there is none.
  virtual absl::StatusOr<v1::Campaign> GetCampaign(absl::string_view id) = 0;

  // ---- Nodes -------------------------------------------------------------

  // Upsert by name: a new node is CALIBRATING; a known one keeps its id and
  // state, unless its fingerprint changed (then CALIBRATING again, noise
  // reset). Records a heartbeat. Needs a name and a fingerprint.
  //
  // DISTRUSTED is final, here and in every call that sets a node's state: a
  // new fingerprint, a calibration or SetNodeState (FailedPrecondition)
  // leave such a node as it is.
  virtual absl::StatusOr<v1::Node> RegisterNode(
      absl::string_view name, const v1::NodeDimensions& dimensions) = 0;
  virtual absl::StatusOr<v1::Node> GetNode(absl::string_view node_id) = 0;
  // Empty states: all nodes. Ordered by name.
  virtual absl::StatusOr<std::vector<v1::Node>> ListNodes(
      absl::Span<const v1::NodeState> states) = 0;
  virtual absl::Status SetNodeState(absl::string_view node_id,
                                    v1::NodeState state) = 0;
  virtual absl::Status RecordNodeHeartbeat(absl::string_view node_id) = 0;

  // ---- Merge queue -------------------------------------------------------

  // Queues an ACCEPTed evaluation whose candidate names a target branch.
  virtual absl::StatusOr<MergeEntry> EnqueueMerge(
      absl::string_view evaluation_id, absl::string_view actor) = 0;
  // Moves an entry: among MERGE_QUEUED, REMEASURING (remeasure_evaluation_id
  // required) and AWAITING_APPROVAL, and either to MERGED (merged_sha
  // required) or MERGE_FAILED; those two are final. Empty merged_sha /
  // remeasure_evaluation_id / approved_by keep the stored values (an
  // approval, once given, stays); message is replaced.
  virtual absl::StatusOr<MergeEntry> UpdateMerge(
      absl::string_view evaluation_id, const v1::MergeStatus& status,
      absl::string_view actor) = 0;
  virtual absl::StatusOr<MergeEntry> GetMergeEntry(
      absl::string_view evaluation_id) = 0;
  // In queue order.
  virtual absl::StatusOr<std::vector<MergeEntry>> ListMergeQueue(
      const MergeQueueFilter& filter) = 0;

  // ---- Audit log (append-only) -------------------------------------------

  // Needs actor and action. Returns the entry's id.
  virtual absl::StatusOr<int64_t> AppendAudit(const AuditEntry& entry) = 0;
  virtual absl::StatusOr<std::vector<AuditEntry>> ListAudit(
      const AuditFilter& filter) = 0;
};

struct StoreOptions {
  // Not owned; must outlive the store. nullptr: SystemClock().
  Clock* clock = nullptr;
  // Apply pending migrations when opening. When false, opening a database
  // whose schema is behind fails with FailedPrecondition (run
  // `densegate db migrate`).
  bool migrate = true;
  // SubmitParams::max_attempts when it is 0.
  int32_t default_max_attempts = 3;
  // SQLite: how long a writer waits for the file lock before Unavailable.
  absl::Duration busy_timeout = absl::Seconds(10);
  // PostgreSQL: idle connections kept for reuse (more are opened on demand
  // while many threads call at once).
  int max_idle_connections = 16;
  // PostgreSQL: claim statements (ClaimJobs, FinishLeaseAndClaimNext) this
  // store has in flight at once; more wait their turn, in arrival order,
  // and the FinishLeaseAndClaimNext calls waiting together share the next
  // statement. Those statements go to one pipelined connection, where
  // PostgreSQL runs them one after another: with 2, the next batch is
  // already queued when one ends, and 8 nodes on a 2-core machine
  // dispatched faster than with 1 (docs/measurements/dispatch.md, "Finishes and
  // claims in a pipeline"). The limit is per store: several stores on one
  // database (scheduler replicas) each run their statements side by side
  // with the others', racing for the rows at the head of the queue, and
  // four cost PostgreSQL twice as much per dispatch as one ("Several
  // schedulers on one database"). < 1: no limit and no batches. SQLite
  // ignores it: its writers take turns anyway.
  int max_concurrent_claims = 2;
};

// Opens a store from a URL:
//   postgresql://... or postgres://...   PostgreSQL (a libpq connection URI)
//   sqlite:PATH, sqlite://PATH or PATH    SQLite file, created if missing
//   sqlite::memory:                       SQLite in memory (tests)
absl::StatusOr<std::unique_ptr<Store>> OpenStore(
    absl::string_view url, const StoreOptions& options = {});

}  // namespace densegate::results

#endif  // DENSEGATE_RESULTS_STORE_STORE_H_
