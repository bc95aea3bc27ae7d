// The SQL store's implementation class, shared by its source files (one per
// aggregate: sql_store_submissions.cc, _queue, _results, _nodes,
// _merge_queue, _audit; sql_store.cc keeps the shared private helpers).
// Private to results/store; the interface is store.h.
#ifndef DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_IMPL_H_
#define DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_IMPL_H_

#include "results/store/internal/sql_store.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "results/store/internal/batch_turn.h"
#include "results/store/internal/concurrency_limit.h"
#include "platform/status_macros.h"
#include "results/store/internal/schema.h"
#include "results/store/internal/sql_dialect.h"
#include "results/store/internal/sql_statements.h"

namespace densegate::results::internal::sql_store_impl {

// Job states (jobs.state); numerically equal to the evaluation states they
// imply (QUEUED, RUNNING, FINISHED, CANCELLED, DEAD).
inline constexpr int kJobQueued = 1;
inline constexpr int kJobLeased = 2;
inline constexpr int kJobDone = 3;
inline constexpr int kJobCancelled = 4;
inline constexpr int kJobDead = 5;

// Lease states (leases.state).
inline constexpr int kLeaseActive = 1;
inline constexpr int kLeaseFinished = 2;
inline constexpr int kLeaseExpired = 3;
inline constexpr int kLeaseCancelled = 4;
inline constexpr int kLeaseFailed = 5;

// Queue order between kinds of work.
inline constexpr int kClassCalibration = 0;
inline constexpr int kClassCi = 1;
inline constexpr int kClassExperiment = 2;
// A merge-queue re-measure (candidate.remeasure_of) holds its branch: every
// accepted candidate behind it waits. It is queued as CI work at the top
// priority, ahead of all other gate work.
inline constexpr int32_t kRemeasurePriority = std::numeric_limits<int32_t>::max();

inline constexpr int kDefaultPageSize = 50;
inline constexpr int kMaxPageSize = 1000;
inline constexpr int kMaxListLimit = 10000;
// Most jobs one claim leases; larger requests get this many.
inline constexpr int kMaxClaim = 1000;

inline google::protobuf::Timestamp ToProto(int64_t us) {
  google::protobuf::Timestamp t;
  t.set_seconds(us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000));
  t.set_nanos(static_cast<int32_t>((us - t.seconds() * 1000000) * 1000));
  return t;
}

inline int64_t FromProto(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}

inline absl::Time FromUs(int64_t us) { return absl::FromUnixMicros(us); }

inline std::string FormatUs(int64_t us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", FromUs(us),
                          absl::UTCTimeZone());
}

inline std::string NewId(absl::string_view prefix) {
  thread_local absl::BitGen gen;
  uint64_t a = absl::Uniform<uint64_t>(gen);
  uint64_t b = absl::Uniform<uint64_t>(gen);
  return absl::StrFormat("%s-%016x%04x", prefix, a, b & 0xffff);
}

template <typename M>
inline absl::StatusOr<M> Parse(const std::string& bytes, absl::string_view what) {
  M m;
  if (!m.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(
        "stored ", what, " does not parse as ", M::descriptor()->full_name()));
  }
  return m;
}

inline bool Finite(double v) { return std::isfinite(v); }

inline absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

inline const char* JobStateName(int s) {
  switch (s) {
    case kJobQueued:
      return "QUEUED";
    case kJobLeased:
      return "LEASED";
    case kJobDone:
      return "DONE";
    case kJobCancelled:
      return "CANCELLED";
    case kJobDead:
      return "DEAD";
  }
  return "UNKNOWN";
}

struct LeaseRow {
  std::string id;
  int64_t job_id = 0;
  int job_kind = 0;
  std::string evaluation_id;
  std::string node_id;
  int attempt = 0;
  int state = 0;
  int64_t expires_at_us = 0;
  std::string end_reason;
};

inline constexpr char kLeaseColumns[] =
    "SELECT id, job_id, job_kind, evaluation_id, node_id, attempt, state, "
    "expires_at_us, end_reason FROM leases WHERE id = $1";

inline LeaseRow LeaseFromRow(const SqlRow& r) {
  LeaseRow l;
  l.id = r.Text(0);
  l.job_id = r.Int(1);
  l.job_kind = static_cast<int>(r.Int(2));
  l.evaluation_id = r.Text(3);
  l.node_id = r.Text(4);
  l.attempt = static_cast<int>(r.Int(5));
  l.state = static_cast<int>(r.Int(6));
  l.expires_at_us = r.Int(7);
  l.end_reason = r.Text(8);
  return l;
}

// Why `lease` cannot be used by `ref` at `now_us`; OK when it is live.
inline absl::Status CheckLive(const LeaseRow& lease, const LeaseRef& ref,
                       int64_t now_us) {
  if (lease.node_id != ref.node_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease.id, " is held by node '", lease.node_id,
                     "', not '", ref.node_id, "'; nothing was written"));
  }
  switch (lease.state) {
    case kLeaseActive:
      if (lease.expires_at_us <= now_us) {
        return absl::FailedPreconditionError(absl::StrCat(
            "lease ", lease.id, " expired at ", FormatUs(lease.expires_at_us),
            " (now ", FormatUs(now_us),
            "); its job goes back to the queue: drop its results. Nothing "
            "was written"));
      }
      return absl::OkStatus();
    case kLeaseFinished:
      return absl::FailedPreconditionError(absl::StrCat(
          "lease ", lease.id,
          " was already finished: a lease's outcome is written once. Nothing "
          "was written"));
    case kLeaseExpired:
      return absl::FailedPreconditionError(absl::StrCat(
          "lease ", lease.id, " expired at ", FormatUs(lease.expires_at_us),
          " and its job went back to the queue (", lease.end_reason,
          "): drop its results. Nothing was written"));
    case kLeaseCancelled:
      return absl::FailedPreconditionError(
          absl::StrCat("lease ", lease.id, " was cancelled (", lease.end_reason,
                       "): stop the job. Nothing was written"));
    case kLeaseFailed:
      return absl::FailedPreconditionError(absl::StrCat(
          "lease ", lease.id, " already ended with an infrastructure failure (",
          lease.end_reason, "). Nothing was written"));
  }
  return absl::InternalError(
      absl::StrCat("lease ", lease.id, " has unknown state ", lease.state));
}

inline absl::Status ValidateRef(const LeaseRef& ref) {
  if (ref.lease_id.empty()) return Invalid("lease_id is empty");
  if (ref.node_id.empty()) return Invalid("node_id is empty");
  return absl::OkStatus();
}

class SqlStore : public Store {
 public:
  SqlStore(std::unique_ptr<SqlDriver> driver, const StoreOptions& options,
           SqlStoreHooks hooks)
      : driver_(std::move(driver)),
        options_(options),
        clock_(options.clock != nullptr ? options.clock : SystemClock()),
        dialect_(SqlDialectOf(driver_->dialect())),
        claims_(dialect_.OneStatementWrites() ? options.max_concurrent_claims : 0,
                hooks.claim_waits),
        finish_batches_(dialect_.OneStatementWrites() ? options.max_concurrent_claims : 0,
                        kMaxFinishBatch, hooks.claim_waits) {}

  absl::string_view backend() const override;

  absl::Status Migrate() override;

  absl::StatusOr<int> SchemaVersion() override;

  // ---- Submissions -------------------------------------------------------

  absl::StatusOr<SubmitResult> Submit(const SubmitParams& params) override;

  absl::StatusOr<v1::Evaluation> GetEvaluation(
      absl::string_view evaluation_id) override;

  absl::StatusOr<v1::Evaluation> FindByCandidate(
      absl::string_view candidate_id) override;

  absl::StatusOr<v1::ListEvaluationsResponse> ListEvaluations(
      const v1::ListEvaluationsRequest& request) override;

  absl::StatusOr<v1::Evaluation> CancelEvaluation(
      absl::string_view evaluation_id, absl::string_view actor,
      absl::string_view reason) override;

  // ---- Queue -------------------------------------------------------------

  absl::StatusOr<int64_t> CountQueuedOverNoiseLimit(double noise) override;

  absl::StatusOr<int64_t> EnqueueCalibration(absl::string_view node_id,
                                             int32_t max_attempts) override;

  absl::StatusOr<std::vector<v1::Lease>> ClaimJobs(
      const ClaimRequest& request) override;

  absl::StatusOr<LeaseRenewal> RenewLease(const LeaseRef& ref,
                                          absl::Duration ttl) override;

  absl::Status FinishLease(const LeaseRef& ref,
                           const v1::Verdict& verdict) override;

  absl::StatusOr<NextClaim> FinishLeaseAndClaimNext(
      const LeaseRef& ref, const v1::Verdict& verdict,
      absl::Duration lease_duration) override;

  FinishBatchCounts finish_batch_counts() const override;

  absl::Status FinishCalibration(const LeaseRef& ref, double noise,
                                 v1::NodeState new_state) override;

  absl::StatusOr<v1::EvaluationState> FailLease(
      const LeaseRef& ref, absl::string_view error) override;

  absl::StatusOr<std::vector<ReclaimedLease>> ReclaimExpiredLeases(
      int limit) override;

  absl::StatusOr<QueueCounts> CountJobs() override;

  // ---- Stages, samples, verdicts -----------------------------------------

  absl::Status RecordStage(const LeaseRef& ref,
                           const v1::Stage& stage) override;

  absl::StatusOr<std::vector<StageRecord>> ListStages(
      absl::string_view evaluation_id) override;

  absl::StatusOr<std::vector<int64_t>> AppendSamples(
      const LeaseRef& ref, absl::Span<const v1::Sample> samples) override;

  absl::StatusOr<std::vector<v1::Sample>> ListSamples(
      absl::string_view evaluation_id) override;

  absl::StatusOr<v1::Verdict> GetVerdict(
      absl::string_view evaluation_id) override;

  absl::StatusOr<std::vector<MetricComparisonRecord>> ListMetricComparisons(
      const MetricHistoryFilter& filter) override;

  // ---- Feedback bundles ----------------------------------------------------

  absl::Status PutFeedback(const LeaseRef& ref, const v1::FeedbackBundle& bundle,
                           absl::string_view summary_json,
                           const FeedbackPolicy& policy) override;

  absl::StatusOr<FeedbackRecord> GetFeedback(absl::string_view evaluation_id,
                                             bool with_files) override;

  // ---- Campaigns -----------------------------------------------------------

  absl::StatusOr<v1::Campaign> PutCampaign(const v1::Campaign& campaign) override;
  absl::StatusOr<v1::Campaign> GetCampaign(absl::string_view id) override;

  // ---- Nodes -------------------------------------------------------------

  absl::StatusOr<v1::Node> RegisterNode(
      absl::string_view name, const v1::NodeDimensions& dims) override;

  absl::StatusOr<v1::Node> GetNode(absl::string_view node_id) override;

  absl::StatusOr<std::vector<v1::Node>> ListNodes(
      absl::Span<const v1::NodeState> states) override;

  absl::Status SetNodeState(absl::string_view node_id,
                            v1::NodeState state) override;

  absl::Status RecordNodeHeartbeat(absl::string_view node_id) override;

  // ---- Merge queue -------------------------------------------------------

  absl::StatusOr<MergeEntry> EnqueueMerge(absl::string_view evaluation_id,
                                          absl::string_view actor) override;

  absl::StatusOr<MergeEntry> UpdateMerge(absl::string_view evaluation_id,
                                         const v1::MergeStatus& status,
                                         absl::string_view actor) override;

  absl::StatusOr<MergeEntry> GetMergeEntry(
      absl::string_view evaluation_id) override;

  absl::StatusOr<std::vector<MergeEntry>> ListMergeQueue(
      const MergeQueueFilter& filter) override;

  // ---- Audit -------------------------------------------------------------

  absl::StatusOr<int64_t> AppendAudit(const AuditEntry& entry) override;

  absl::StatusOr<std::vector<AuditEntry>> ListAudit(
      const AuditFilter& filter) override;

 private:
  // Columns of kEvaluationSelect, in order.
  static constexpr int kEvalSeqColumn = 12;
  static constexpr char kEvaluationSelect[] =
      "SELECT e.id, e.state, e.node_id, e.attempt, e.created_at_us, "
      "e.updated_at_us, c.proto, v.proto, m.state, m.merged_sha, "
      "m.remeasure_evaluation_id, m.message, e.seq, m.approved_by FROM evaluations e JOIN "
      "candidates c ON c.id = e.candidate_id LEFT JOIN verdicts v ON "
      "v.evaluation_id = e.id LEFT JOIN merge_queue m ON m.evaluation_id = "
      "e.id ";

  static constexpr char kNodeSelect[] =
      "SELECT n.id, n.name, n.dimensions, n.state, n.calibration_noise, "
      "n.last_heartbeat_us, (SELECT l.id FROM leases l WHERE l.node_id = n.id "
      "AND l.state = 1 ORDER BY l.granted_at_us DESC, l.id DESC LIMIT 1) FROM "
      "nodes n";

  static constexpr char kMergeSelect[] =
      "SELECT m.position, m.evaluation_id, r.url, m.target_branch, m.state, "
      "m.merged_sha, m.remeasure_evaluation_id, m.message, m.created_at_us, "
      "m.updated_at_us, m.approved_by FROM merge_queue m JOIN repos r ON r.id = m.repo_id";

  int64_t NowUs() const { return absl::ToUnixMicros(clock_->Now()); }

  absl::Status Run(absl::string_view op, TxMode mode,
                   absl::FunctionRef<absl::Status(SqlTx&)> fn);


  static absl::Status ValidateRequirements(const JobRequirements& r);

  absl::StatusOr<int64_t> UpsertRepo(SqlTx& tx, absl::string_view url,
                                     int64_t now);

  absl::Status AuditTx(SqlTx& tx, int64_t now, absl::string_view actor,
                       absl::string_view action, absl::string_view subject,
                       absl::string_view detail);

  absl::Status RequireEvaluation(SqlTx& tx, absl::string_view id);

  absl::StatusOr<v1::Evaluation> EvaluationFromRow(const SqlRow& row);

  absl::StatusOr<v1::Evaluation> LoadEvaluation(SqlTx& tx, absl::string_view id,
                                                bool with_stages);

  absl::StatusOr<v1::Node> NodeFromRow(const SqlRow& row);

  absl::StatusOr<v1::Node> LoadNode(SqlTx& tx, absl::string_view id);

  static MergeEntry MergeFromRow(const SqlRow& row);

  absl::StatusOr<MergeEntry> LoadMerge(SqlTx& tx,
                                       absl::string_view evaluation_id);

  // A job ClaimInTx leased.
  struct Claimed {
    int64_t job_id;
    int kind;
    std::string evaluation_id;
    int attempts;
    std::string lease_id;
    int priority_class;
    int priority;
    int64_t created_at_us;
    std::string candidate;
  };

  // Leases up to `limit` queued jobs matching `d` to `node_id` within `tx`.
  absl::StatusOr<std::vector<Claimed>> ClaimInTx(SqlTx& tx,
                                                 const std::string& node_id,
                                                 const v1::NodeDimensions& d,
                                                 int limit, int64_t now,
                                                 int64_t expires);

  // A row of kPgClaim's result (or of kPgFinishAndClaim's, from `first`).
  static Claimed ClaimedFromRow(const SqlRow& row, int first);

  // The leases of `claimed`, in claim order (calibration, class, priority,
  // submission).
  absl::StatusOr<std::vector<v1::Lease>> LeasesFrom(
      std::vector<Claimed> claimed, const std::string& node_id, int64_t now,
      int64_t expires);

  // A verdict as FinishLease stores it, and the sample ids it names.
  struct StoredVerdict {
    v1::Verdict verdict;
    std::set<int64_t> sample_ids;
  };

  // One FinishLeaseAndClaimNext in a batch of kPgFinishAndClaimBatch.
  struct FinishBatchItem {
    const LeaseRef* ref;
    const StoredVerdict* verdict;
    absl::Duration lease_duration;
    // Set by the batch. `now` and the new lease's expiry are the batch's.
    absl::Status status;
    int64_t now_us = 0;
    int64_t expires_at_us = 0;
    bool ended = false;
    // False: the batch claimed nothing for anyone (its nodes do not all
    // match the same jobs); claim for this node alone.
    bool batched = true;
    std::optional<v1::NodeState> node_state;
    std::vector<Claimed> claimed;
  };

  // Checks what FinishLease can check without the database and completes
  // the stored verdict (decided_at, provenance.node_id). Its evaluation_id
  // and candidate_id are set from the indexed columns when read back.
  static absl::StatusOr<StoredVerdict> PrepareVerdict(
      const LeaseRef& ref, const v1::Verdict& verdict, int64_t now);

  // FinishLease step by step in a write transaction: says precisely what is
  // wrong when the lease or the verdict does not fit.
  absl::Status FinishInTx(SqlTx& tx, const LeaseRef& ref,
                          const StoredVerdict& stored, int64_t now);

  static int64_t SeedColumn(const v1::Verdict& v);

  // The parameters of PgFinish() ($1-$29; PgFinishAndClaim() adds $30).
  static std::vector<SqlValue> PgFinishArgs(const LeaseRef& ref,
                                            const StoredVerdict& stored,
                                            int64_t now);

  // The parameters of kPgFinishAndClaimBatch ($1-$32).
  static std::vector<SqlValue> PgFinishBatchArgs(
      absl::Span<FinishBatchItem* const> batch, int64_t now);

  // Runs kPgFinishAndClaimBatch for `batch` in a claim turn and sets each
  // item's results. If the statement fails for another reason than a lost
  // connection (whose outcome is unknown for all), each lease is tried
  // alone, so that one lease's error is only its own.
  void RunFinishBatch(absl::Span<FinishBatchItem* const> batch);

  absl::Status ExecFinishBatch(absl::Span<FinishBatchItem* const> batch);

  // A batch of one: PgFinish() and kPgClaimAfterFinish, which cost
  // PostgreSQL about 200 us less than kPgFinishAndClaimBatch for one lease
  // (docs/measurements/dispatch.md, "Finishes and claims in batches").
  absl::Status ExecFinishOne(FinishBatchItem& item);

  // Locks the lease, then its job (the global lock order: leases, jobs,
  // evaluations), and checks that `ref` may use the lease.
  absl::StatusOr<LeaseRow> LockLiveLease(SqlTx& tx, const LeaseRef& ref,
                                         int64_t now);

  // For writes that only add rows under a live evaluation lease (stages,
  // samples): a shared lock keeps the lease live until commit.
  absl::StatusOr<LeaseRow> SharedLiveLease(SqlTx& tx, const LeaseRef& ref,
                                           int64_t now);

  // Lease ended with an outcome: lease finished, job done, evaluation in
  // `state`.
  absl::Status EndLease(SqlTx& tx, const LeaseRow& lease, int64_t now,
                        v1::EvaluationState state, absl::string_view reason);

  // Lease ended without an outcome (infrastructure failure or expiry): the
  // job is queued again, or DEAD once its attempts are used up.
  absl::StatusOr<v1::EvaluationState> ReleaseJob(SqlTx& tx,
                                                 const LeaseRow& lease,
                                                 int lease_state,
                                                 absl::string_view reason,
                                                 int64_t now);

  // PostgreSQL plans the claim from its statistics of `jobs`. A burst of
  // submissions into a queue it last saw empty (a new database: `jobs`
  // never analyzed, or analyzed before the burst) makes it plan for an
  // empty queue, a bitmap scan of the queue and a sort on every claim (9.8
  // ms a claim with 12,000 queued, 120 ms with 112,000; 0.05 ms once
  // analyzed), and each connection keeps that plan until autovacuum
  // analyzes the table, a minute or more later. So the store analyzes
  // `jobs` itself after every this many submissions it queued.
  static constexpr int64_t kSubmissionsPerQueueAnalyze = 1000;

  std::unique_ptr<SqlDriver> driver_;
  const StoreOptions options_;
  Clock* const clock_;
  const SqlDialect& dialect_;
  // Claims in flight from this store (StoreOptions::max_concurrent_claims).
  ConcurrencyLimit claims_;
  // PostgreSQL's FinishLeaseAndClaimNext callers, in batches of up to
  // kMaxFinishBatch, as many batches at once as claims_ allows.
  BatchTurn<FinishBatchItem> finish_batches_;
  std::atomic<int64_t> finish_statements_{0};  // finish_batch_counts()
  std::atomic<int64_t> finish_statement_leases_{0};
  std::atomic<int64_t> submissions_{0};  // Queued by this store object.
};

}  // namespace densegate::results::internal::sql_store_impl

#endif  // DENSEGATE_RESULTS_STORE_INTERNAL_SQL_STORE_IMPL_H_
