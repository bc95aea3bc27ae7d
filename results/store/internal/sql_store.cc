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
#include "results/store/internal/schema.h"
#include "results/store/internal/status_macros.h"

namespace densegate::results::internal {
namespace {

// Job states (jobs.state); numerically equal to the evaluation states they
// imply (QUEUED, RUNNING, FINISHED, CANCELLED, DEAD).
constexpr int kJobQueued = 1;
constexpr int kJobLeased = 2;
constexpr int kJobDone = 3;
constexpr int kJobCancelled = 4;
constexpr int kJobDead = 5;

// Lease states (leases.state).
constexpr int kLeaseActive = 1;
constexpr int kLeaseFinished = 2;
constexpr int kLeaseExpired = 3;
constexpr int kLeaseCancelled = 4;
constexpr int kLeaseFailed = 5;

// Queue order between kinds of work.
constexpr int kClassCalibration = 0;
constexpr int kClassCi = 1;
constexpr int kClassExperiment = 2;
// A merge-queue re-measure (candidate.remeasure_of) holds its branch: every
// accepted candidate behind it waits. It is queued as CI work at the top
// priority, ahead of all other gate work.
constexpr int32_t kRemeasurePriority = std::numeric_limits<int32_t>::max();

constexpr int kDefaultPageSize = 50;
constexpr int kMaxPageSize = 1000;
constexpr int kMaxListLimit = 10000;
// Most jobs one claim leases; larger requests get this many.
constexpr int kMaxClaim = 1000;
// FinishLeaseAndClaimNext calls in one PostgreSQL statement, at most.
constexpr int kMaxFinishBatch = 16;

google::protobuf::Timestamp ToProto(int64_t us) {
  google::protobuf::Timestamp t;
  t.set_seconds(us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000));
  t.set_nanos(static_cast<int32_t>((us - t.seconds() * 1000000) * 1000));
  return t;
}

int64_t FromProto(const google::protobuf::Timestamp& t) {
  return t.seconds() * 1000000 + t.nanos() / 1000;
}

absl::Time FromUs(int64_t us) { return absl::FromUnixMicros(us); }

std::string FormatUs(int64_t us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", FromUs(us),
                          absl::UTCTimeZone());
}

std::string NewId(absl::string_view prefix) {
  thread_local absl::BitGen gen;
  uint64_t a = absl::Uniform<uint64_t>(gen);
  uint64_t b = absl::Uniform<uint64_t>(gen);
  return absl::StrFormat("%s-%016x%04x", prefix, a, b & 0xffff);
}

template <typename M>
absl::StatusOr<M> Parse(const std::string& bytes, absl::string_view what) {
  M m;
  if (!m.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(
        "stored ", what, " does not parse as ", M::descriptor()->full_name()));
  }
  return m;
}

bool Finite(double v) { return std::isfinite(v); }

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(what);
}

const char* JobStateName(int s) {
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

constexpr char kLeaseColumns[] =
    "SELECT id, job_id, job_kind, evaluation_id, node_id, attempt, state, "
    "expires_at_us, end_reason FROM leases WHERE id = $1";

LeaseRow LeaseFromRow(const SqlRow& r) {
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
absl::Status CheckLive(const LeaseRow& lease, const LeaseRef& ref,
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

absl::Status ValidateRef(const LeaseRef& ref) {
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
        pg_(driver_->dialect() == Dialect::kPostgres),
        claims_(pg_ ? options.max_concurrent_claims : 0, hooks.claim_waits),
        finish_batches_(pg_ ? options.max_concurrent_claims : 0,
                        kMaxFinishBatch, hooks.claim_waits) {}

  absl::string_view backend() const override {
    return pg_ ? "postgresql" : "sqlite";
  }

  absl::Status Migrate() override {
    return ApplyMigrations(*driver_, AllMigrations(), NowUs());
  }

  absl::StatusOr<int> SchemaVersion() override {
    return CurrentSchemaVersion(*driver_);
  }

  // ---- Submissions -------------------------------------------------------

  absl::StatusOr<SubmitResult> Submit(const SubmitParams& params) override {
    const v1::Candidate& in = params.candidate;
    if (in.id().empty()) {
      return Invalid(
          "candidate.id is empty: set it to the content hash of (repo, "
          "baseline_sha, candidate_sha, manifest_hash)");
    }
    if (in.repo().empty()) return Invalid("candidate.repo is empty");
    if (in.kind() != v1::CI && in.kind() != v1::EXPERIMENT) {
      return Invalid(
          absl::StrCat("candidate.kind must be CI or EXPERIMENT, got ",
                       v1::CandidateKind_Name(in.kind())));
    }
    if (in.baseline_sha().empty() || in.candidate_sha().empty()) {
      return Invalid(
          "candidate.baseline_sha and candidate.candidate_sha are required: "
          "resolve the refs to commits before submitting");
    }
    if (in.submitter().empty()) {
      return Invalid(
          "candidate.submitter is empty: set it from the caller's token");
    }
    if (params.max_attempts < 0) {
      return Invalid(absl::StrCat(
          "max_attempts must be >= 0 (0: default), got ", params.max_attempts));
    }
    DG_RETURN_IF_ERROR(ValidateRequirements(params.requirements));
    v1::Candidate c = in;
    c.set_policy(EffectivePolicy(c.policy(), c.kind()));
    const int64_t now = NowUs();
    if (!c.has_submitted_at()) *c.mutable_submitted_at() = ToProto(now);
    const int max_attempts = params.max_attempts > 0
                                 ? params.max_attempts
                                 : std::max(1, options_.default_max_attempts);
    const JobRequirements& req = params.requirements;

    SubmitResult result;
    DG_RETURN_IF_ERROR(
        Run("Submit", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(int64_t repo_id, UpsertRepo(tx, c.repo(), now));
          DG_ASSIGN_OR_RETURN(
              SqlResult ins,
              tx.Exec(
                  "INSERT INTO candidates (id, repo_id, target_branch, "
                  "baseline_sha, candidate_sha, manifest_hash, kind, policy, "
                  "submitter, campaign, submitted_at_us, proto) VALUES ($1, "
                  "$2, "
                  "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
                  "ON CONFLICT (id) DO NOTHING",
                  {c.id(), repo_id, c.target_branch(), c.baseline_sha(),
                   c.candidate_sha(), c.manifest_hash(),
                   static_cast<int>(c.kind()), static_cast<int>(c.policy()),
                   c.submitter(), c.campaign(), FromProto(c.submitted_at()),
                   Bytes{c.SerializeAsString()}}));
          if (ins.affected == 0) {
            DG_ASSIGN_OR_RETURN(
                SqlResult prev,
                tx.Exec("SELECT id FROM evaluations WHERE candidate_id = $1 "
                        "ORDER BY seq DESC LIMIT 1",
                        {c.id()}));
            if (prev.rows.empty()) {
              return absl::InternalError(absl::StrCat(
                  "candidate ", c.id(), " is stored without an evaluation"));
            }
            const std::string id = prev.rows[0].Text(0);
            DG_ASSIGN_OR_RETURN(result.evaluation,
                                LoadEvaluation(tx, id, true));
            result.deduplicated = true;
            return AuditTx(tx, now, c.submitter(), "submit.deduplicated", id,
                           absl::StrCat("candidate ", c.id()));
          }
          const std::string id = NewId("ev");
          DG_RETURN_IF_ERROR(
              tx.Exec(
                    "INSERT INTO evaluations (id, candidate_id, repo_id, kind, "
                    "submitter, state, created_at_us, updated_at_us) VALUES "
                    "($1, "
                    "$2, $3, $4, $5, $6, $7, $7)",
                    {id, c.id(), repo_id, static_cast<int>(c.kind()),
                     c.submitter(), static_cast<int>(v1::QUEUED), now})
                  .status());
          const bool remeasure = !c.remeasure_of().empty();
          const int32_t priority =
              remeasure ? kRemeasurePriority : params.priority;
          DG_RETURN_IF_ERROR(
              tx.Exec(
                    "INSERT INTO jobs (kind, evaluation_id, priority_class, "
                    "priority, state, attempts, max_attempts, "
                    "req_accelerator_kind, req_min_accelerator_count, "
                    "req_min_accelerator_memory, req_fingerprint, req_node_id, "
                    "req_max_node_noise, enqueued_at_us, updated_at_us) VALUES "
                    "($1, $2, $3, $4, $5, "
                    "0, $6, $7, $8, $9, $10, $11, $13, $12, $12)",
                    {static_cast<int>(v1::EVALUATION), id,
                     c.kind() == v1::CI || remeasure ? kClassCi
                                                     : kClassExperiment,
                     priority, kJobQueued, max_attempts, req.accelerator_kind,
                     req.min_accelerator_count,
                     req.min_accelerator_memory_bytes, req.fingerprint,
                     req.node_id, now, req.max_node_noise})
                  .status());
          DG_RETURN_IF_ERROR(AuditTx(
              tx, now, c.submitter(), "submit", id,
              absl::StrCat("candidate ", c.id(), " ",
                           v1::CandidateKind_Name(c.kind()), " priority ",
                           priority, remeasure ? " (re-measure)" : "")));
          DG_ASSIGN_OR_RETURN(result.evaluation, LoadEvaluation(tx, id, true));
          return absl::OkStatus();
        }));
    if (pg_ && !result.deduplicated &&
        ++submissions_ % kSubmissionsPerQueueAnalyze == 0) {
      // Best effort: the submission stands, and a failed ANALYZE is tried
      // again after the next batch.
      (void)Run("AnalyzeQueue", TxMode::kSingleStatement,
                [](SqlTx& tx) { return tx.ExecScript("ANALYZE jobs"); });
    }
    return result;
  }

  absl::StatusOr<v1::Evaluation> GetEvaluation(
      absl::string_view evaluation_id) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    v1::Evaluation out;
    DG_RETURN_IF_ERROR(
        Run("GetEvaluation", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(out, LoadEvaluation(tx, evaluation_id, true));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<v1::Evaluation> FindByCandidate(
      absl::string_view candidate_id) override {
    if (candidate_id.empty()) return Invalid("candidate id is empty");
    v1::Evaluation out;
    DG_RETURN_IF_ERROR(
        Run("FindByCandidate", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("SELECT id FROM evaluations WHERE candidate_id = $1 "
                      "ORDER BY seq DESC LIMIT 1",
                      {candidate_id}));
          if (r.rows.empty()) {
            return absl::NotFoundError(
                absl::StrCat("no evaluation of candidate ", candidate_id));
          }
          DG_ASSIGN_OR_RETURN(out, LoadEvaluation(tx, r.rows[0].Text(0), true));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<v1::ListEvaluationsResponse> ListEvaluations(
      const v1::ListEvaluationsRequest& request) override {
    if (request.page_size() < 0) {
      return Invalid(
          absl::StrCat("page_size must be >= 0, got ", request.page_size()));
    }
    const int page_size = request.page_size() == 0
                              ? kDefaultPageSize
                              : std::min(request.page_size(), kMaxPageSize);
    int64_t before_seq = 0;
    if (!request.page_token().empty() &&
        (!absl::SimpleAtoi(request.page_token(), &before_seq) ||
         before_seq <= 0)) {
      return Invalid(absl::StrCat("page_token '", request.page_token(),
                                  "' is not a token this store returned"));
    }
    std::string sql = absl::StrCat(kEvaluationSelect, "WHERE 1 = 1");
    std::vector<SqlValue> args;
    auto arg = [&](SqlValue v) {
      args.push_back(std::move(v));
      return absl::StrCat("$", args.size());
    };
    if (request.states_size() > 0) {
      std::vector<std::string> ps;
      for (int s : request.states()) {
        if (s == v1::EVALUATION_STATE_UNSPECIFIED) {
          return Invalid("states contains EVALUATION_STATE_UNSPECIFIED");
        }
        ps.push_back(arg(s));
      }
      absl::StrAppend(&sql, " AND e.state IN (", absl::StrJoin(ps, ", "), ")");
    }
    if (request.kind() != v1::CANDIDATE_KIND_UNSPECIFIED) {
      absl::StrAppend(&sql,
                      " AND e.kind = ", arg(static_cast<int>(request.kind())));
    }
    if (!request.repo().empty()) {
      absl::StrAppend(&sql,
                      " AND e.repo_id = (SELECT id FROM repos WHERE url = ",
                      arg(request.repo()), ")");
    }
    if (request.has_since()) {
      absl::StrAppend(
          &sql, " AND e.created_at_us >= ", arg(FromProto(request.since())));
    }
    if (!request.submitter().empty()) {
      absl::StrAppend(&sql, " AND e.submitter = ", arg(request.submitter()));
    }
    if (before_seq > 0) absl::StrAppend(&sql, " AND e.seq < ", arg(before_seq));
    absl::StrAppend(&sql, " ORDER BY e.seq DESC LIMIT ", arg(page_size + 1));

    v1::ListEvaluationsResponse out;
    DG_RETURN_IF_ERROR(
        Run("ListEvaluations", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
          for (size_t i = 0;
               i < r.rows.size() && i < static_cast<size_t>(page_size); ++i) {
            DG_ASSIGN_OR_RETURN(*out.add_evaluations(),
                                EvaluationFromRow(r.rows[i]));
          }
          if (r.rows.size() > static_cast<size_t>(page_size)) {
            out.set_next_page_token(
                absl::StrCat(r.rows[page_size - 1].Int(kEvalSeqColumn)));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<v1::Evaluation> CancelEvaluation(
      absl::string_view evaluation_id, absl::string_view actor,
      absl::string_view reason) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    if (actor.empty()) return Invalid("actor is empty: say who cancels");
    const int64_t now = NowUs();
    v1::Evaluation out;
    DG_RETURN_IF_ERROR(
        Run("CancelEvaluation", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          // Lock order everywhere: leases, then jobs, then evaluations.
          DG_RETURN_IF_ERROR(
              tx.Exec(absl::StrCat(
                          "SELECT id FROM leases WHERE id = (SELECT "
                          "current_lease_id FROM jobs WHERE evaluation_id "
                          "= $1) AND state = $2",
                          ForUpdate()),
                      {evaluation_id, kLeaseActive})
                  .status());
          DG_RETURN_IF_ERROR(
              tx.Exec(
                    absl::StrCat("SELECT id FROM jobs WHERE evaluation_id = $1",
                                 ForUpdate()),
                    {evaluation_id})
                  .status());
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("SELECT state FROM evaluations WHERE id = $1",
                      {evaluation_id}));
          if (r.rows.empty()) {
            return absl::NotFoundError(
                absl::StrCat("evaluation ", evaluation_id, " not found"));
          }
          const int state = static_cast<int>(r.rows[0].Int(0));
          if (state != v1::QUEUED && state != v1::RUNNING) {
            return absl::FailedPreconditionError(absl::StrCat(
                "evaluation ", evaluation_id, " is ",
                v1::EvaluationState_Name(
                    static_cast<v1::EvaluationState>(state)),
                "; only QUEUED or RUNNING evaluations can be cancelled"));
          }
          const std::string why = absl::StrCat(
              "cancelled by ", actor, reason.empty() ? "" : ": ", reason);
          DG_RETURN_IF_ERROR(
              tx.Exec("UPDATE leases SET state = $2, ended_at_us = $3, "
                      "end_reason = "
                      "$4 WHERE id = (SELECT current_lease_id FROM jobs WHERE "
                      "evaluation_id = $1) AND state = $5",
                      {evaluation_id, kLeaseCancelled, now, why, kLeaseActive})
                  .status());
          DG_RETURN_IF_ERROR(
              tx.Exec("UPDATE jobs SET state = $2, updated_at_us = $3 WHERE "
                      "evaluation_id = $1",
                      {evaluation_id, kJobCancelled, now})
                  .status());
          DG_RETURN_IF_ERROR(
              tx.Exec(
                    "UPDATE evaluations SET state = $2, cancel_reason = $3, "
                    "updated_at_us = $4 WHERE id = $1",
                    {evaluation_id, static_cast<int>(v1::CANCELLED), why, now})
                  .status());
          DG_RETURN_IF_ERROR(
              AuditTx(tx, now, actor, "cancel", evaluation_id, reason));
          DG_ASSIGN_OR_RETURN(out, LoadEvaluation(tx, evaluation_id, true));
          return absl::OkStatus();
        }));
    return out;
  }

  // ---- Queue -------------------------------------------------------------

  absl::StatusOr<int64_t> CountQueuedOverNoiseLimit(double noise) override {
    int64_t count = 0;
    DG_RETURN_IF_ERROR(Run(
        "CountQueuedOverNoiseLimit", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("SELECT count(*) FROM jobs WHERE state = $1 AND req_max_node_noise > 0 "
                      "AND req_max_node_noise < $2",
                      {kJobQueued, noise}));
          count = r.rows.at(0).Int(0);
          return absl::OkStatus();
        }));
    return count;
  }

  absl::StatusOr<int64_t> EnqueueCalibration(absl::string_view node_id,
                                             int32_t max_attempts) override {
    if (node_id.empty()) return Invalid("node_id is empty");
    if (max_attempts < 0) return Invalid("max_attempts must be >= 0");
    const int attempts = max_attempts > 0
                             ? max_attempts
                             : std::max(1, options_.default_max_attempts);
    const int64_t now = NowUs();
    int64_t job_id = 0;
    DG_RETURN_IF_ERROR(Run(
        "EnqueueCalibration", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult n,
              tx.Exec(absl::StrCat("SELECT id FROM nodes WHERE id = $1",
                                   ForUpdate()),
                      {node_id}));
          if (n.rows.empty()) {
            return absl::NotFoundError(
                absl::StrCat("node ", node_id, " is not registered"));
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult live,
              tx.Exec(
                  "SELECT id FROM jobs WHERE kind = $1 AND req_node_id = $2 "
                  "AND state IN ($3, $4)",
                  {static_cast<int>(v1::CALIBRATION), node_id, kJobQueued,
                   kJobLeased}));
          if (!live.rows.empty()) {
            return absl::AlreadyExistsError(
                absl::StrCat("node ", node_id, " already has calibration job ",
                             live.rows[0].Int(0), " queued or running"));
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult ins,
              tx.Exec("INSERT INTO jobs (kind, evaluation_id, priority_class, "
                      "priority, state, attempts, max_attempts, "
                      "req_accelerator_kind, req_min_accelerator_count, "
                      "req_min_accelerator_memory, req_fingerprint, "
                      "req_node_id, enqueued_at_us, updated_at_us) VALUES ($1, "
                      "NULL, $2, 0, $3, 0, $4, '', 0, 0, '', $5, $6, $6) "
                      "RETURNING id",
                      {static_cast<int>(v1::CALIBRATION), kClassCalibration,
                       kJobQueued, attempts, node_id, now}));
          job_id = ins.rows.at(0).Int(0);
          return absl::OkStatus();
        }));
    return job_id;
  }

  absl::StatusOr<std::vector<v1::Lease>> ClaimJobs(
      const ClaimRequest& request) override {
    if (request.node_id.empty()) return Invalid("node_id is empty");
    if (request.max_jobs < 1) {
      return Invalid(
          absl::StrCat("max_jobs must be >= 1, got ", request.max_jobs));
    }
    if (request.lease_duration <= absl::ZeroDuration()) {
      return Invalid("lease_duration must be positive");
    }
    const int64_t now = NowUs();
    const int64_t expires =
        now + absl::ToInt64Microseconds(request.lease_duration);
    std::vector<Claimed> claimed;
    const int limit = std::min(request.max_jobs, kMaxClaim);
    {
      ConcurrencyLimit::Turn turn(claims_);
      if (pg_) {
        // One statement, in autocommit mode, queued on the pipelined
        // connection with the finish-and-claim batches: PostgreSQL runs
        // the claim statements one after another.
        DG_ASSIGN_OR_RETURN(SqlResult r,
                            driver_->ExecPipelined(
                                "ClaimJobs", PgClaim(limit),
                                PgClaimArgs(request.node_id, request.dimensions,
                                            now, expires)));
        for (const SqlRow& row : r.rows) {
          claimed.push_back(ClaimedFromRow(row, 0));
        }
      } else {
        DG_RETURN_IF_ERROR(
            Run("ClaimJobs", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
              DG_ASSIGN_OR_RETURN(
                  claimed, ClaimInTx(tx, request.node_id, request.dimensions,
                                     limit, now, expires));
              return absl::OkStatus();
            }));
      }
    }
    return LeasesFrom(std::move(claimed), request.node_id, now, expires);
  }

  absl::StatusOr<LeaseRenewal> RenewLease(const LeaseRef& ref,
                                          absl::Duration ttl) override {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (ttl <= absl::ZeroDuration()) return Invalid("ttl must be positive");
    const int64_t now = NowUs();
    const int64_t expires = now + absl::ToInt64Microseconds(ttl);
    LeaseRenewal out;
    if (pg_) {
      // The common case: one statement in autocommit mode.
      bool renewed = false;
      DG_RETURN_IF_ERROR(Run(
          "RenewLease", TxMode::kSingleStatement,
          [&](SqlTx& tx) -> absl::Status {
            DG_ASSIGN_OR_RETURN(
                SqlResult r,
                tx.Exec("WITH l AS (UPDATE leases SET expires_at_us = $4 WHERE "
                        "id = $1 AND node_id = $2 AND state = 1 AND "
                        "expires_at_us > $3 RETURNING node_id), n AS (UPDATE "
                        "nodes SET last_heartbeat_us = $3 WHERE id IN (SELECT "
                        "node_id FROM l)) SELECT count(*) FROM l",
                        {ref.lease_id, ref.node_id, now, expires}));
            renewed = r.rows.at(0).Int(0) == 1;
            return absl::OkStatus();
          }));
      if (renewed) {
        out.expires_at = FromUs(expires);
        return out;
      }
    }
    DG_RETURN_IF_ERROR(
        Run("RenewLease", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          // The common case in one statement; otherwise find out why not.
          DG_ASSIGN_OR_RETURN(
              SqlResult fast,
              tx.Exec("UPDATE leases SET expires_at_us = $4 WHERE id = $1 AND "
                      "node_id = $2 AND state = 1 AND expires_at_us > $3",
                      {ref.lease_id, ref.node_id, now, expires}));
          if (fast.affected == 1) {
            out.expires_at = FromUs(expires);
            return tx
                .Exec("UPDATE nodes SET last_heartbeat_us = $2 WHERE id = $1",
                      {ref.node_id, now})
                .status();
          }
          DG_ASSIGN_OR_RETURN(SqlResult r,
                              tx.Exec(absl::StrCat(kLeaseColumns, ForUpdate()),
                                      {ref.lease_id}));
          if (r.rows.empty()) {
            return absl::NotFoundError(
                absl::StrCat("lease ", ref.lease_id, " not found"));
          }
          LeaseRow lease = LeaseFromRow(r.rows[0]);
          if (lease.node_id != ref.node_id) return CheckLive(lease, ref, now);
          if (lease.state == kLeaseCancelled) {
            out.cancel = true;
            out.cancel_reason = lease.end_reason;
            return absl::OkStatus();
          }
          if (lease.state == kLeaseExpired ||
              (lease.state == kLeaseActive && lease.expires_at_us <= now)) {
            out.cancel = true;
            out.cancel_reason =
                absl::StrCat("lease expired at ", FormatUs(lease.expires_at_us),
                             "; the job was returned to the queue");
            return absl::OkStatus();
          }
          DG_RETURN_IF_ERROR(CheckLive(lease, ref, now));
          DG_RETURN_IF_ERROR(
              tx.Exec("UPDATE leases SET expires_at_us = $2 WHERE id = $1",
                      {ref.lease_id, expires})
                  .status());
          DG_RETURN_IF_ERROR(
              tx.Exec("UPDATE nodes SET last_heartbeat_us = $2 WHERE id = $1",
                      {ref.node_id, now})
                  .status());
          out.expires_at = FromUs(expires);
          return absl::OkStatus();
        }));
    return out;
  }

  absl::Status FinishLease(const LeaseRef& ref,
                           const v1::Verdict& verdict) override {
    const int64_t now = NowUs();
    DG_ASSIGN_OR_RETURN(StoredVerdict v, PrepareVerdict(ref, verdict, now));
    if (pg_) {
      // One statement (autocommit, one round trip) when the lease is live and
      // the verdict consistent; otherwise the step-by-step transaction below
      // finds out what is wrong.
      bool done = false;
      DG_RETURN_IF_ERROR(Run(
          "FinishLease", TxMode::kSingleStatement,
          [&](SqlTx& tx) -> absl::Status {
            DG_ASSIGN_OR_RETURN(SqlResult r,
                                tx.Exec(PgFinish(), PgFinishArgs(ref, v, now)));
            done = r.rows.at(0).Int(0) == 1;
            return absl::OkStatus();
          }));
      if (done) return absl::OkStatus();
    }
    return Run("FinishLease", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
      return FinishInTx(tx, ref, v, now);
    });
  }

  absl::StatusOr<NextClaim> FinishLeaseAndClaimNext(
      const LeaseRef& ref, const v1::Verdict& verdict,
      absl::Duration lease_duration) override {
    if (lease_duration <= absl::ZeroDuration()) {
      return Invalid("lease_duration must be positive");
    }
    int64_t now = NowUs();
    DG_ASSIGN_OR_RETURN(StoredVerdict v, PrepareVerdict(ref, verdict, now));
    NextClaim next;
    std::vector<Claimed> claimed;
    // What is left for the step-by-step transaction below.
    bool finish_here = true;
    bool claim_here = true;
    if (pg_) {
      // With the callers waiting at the same time, in one statement (one
      // round trip, autocommit) when the lease is live and the verdict
      // consistent; otherwise the transaction below finds out what is wrong.
      FinishBatchItem item{&ref, &v, lease_duration};
      finish_batches_.Run(&item,
                          [this](absl::Span<FinishBatchItem* const> batch) {
                            RunFinishBatch(batch);
                          });
      DG_RETURN_IF_ERROR(item.status);
      now = item.now_us;
      if (item.ended) {
        if (item.node_state.has_value()) next.node_state = *item.node_state;
        claimed = std::move(item.claimed);
        finish_here = false;
        // A batch of unlike nodes claimed for none of them.
        claim_here = next.node_state == v1::ACTIVE && !item.batched;
      }
    }
    const int64_t expires = now + absl::ToInt64Microseconds(lease_duration);
    if (finish_here || claim_here) {
      ConcurrencyLimit::Turn turn(claims_);
      DG_RETURN_IF_ERROR(
          Run("FinishLeaseAndClaimNext", TxMode::kWrite,
              [&](SqlTx& tx) -> absl::Status {
                claimed.clear();
                if (finish_here)
                  DG_RETURN_IF_ERROR(FinishInTx(tx, ref, v, now));
                absl::StatusOr<v1::Node> node = LoadNode(tx, ref.node_id);
                // An unregistered node gets no claim; the verdict stands.
                if (absl::IsNotFound(node.status())) return absl::OkStatus();
                if (!node.ok()) return node.status();
                next.node_state = node->state();
                if (next.node_state != v1::ACTIVE) return absl::OkStatus();
                DG_ASSIGN_OR_RETURN(
                    claimed, ClaimInTx(tx, ref.node_id, node->dimensions(), 1,
                                       now, expires));
                return absl::OkStatus();
              }));
    }
    DG_ASSIGN_OR_RETURN(
        std::vector<v1::Lease> leases,
        LeasesFrom(std::move(claimed), ref.node_id, now, expires));
    if (!leases.empty()) next.lease = std::move(leases.front());
    return next;
  }

  FinishBatchCounts finish_batch_counts() const override {
    return {finish_statements_.load(std::memory_order_relaxed),
            finish_statement_leases_.load(std::memory_order_relaxed)};
  }

  absl::Status FinishCalibration(const LeaseRef& ref, double noise,
                                 v1::NodeState new_state) override {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (!Finite(noise) || noise < 0) {
      return Invalid(absl::StrCat(
          "calibration noise must be finite and >= 0, got ", noise));
    }
    if (new_state == v1::NODE_STATE_UNSPECIFIED ||
        !v1::NodeState_IsValid(new_state)) {
      return Invalid("new node state is unspecified");
    }
    const int64_t now = NowUs();
    return Run(
        "FinishCalibration", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(LeaseRow lease, LockLiveLease(tx, ref, now));
          if (lease.job_kind != v1::CALIBRATION) {
            return absl::FailedPreconditionError(absl::StrCat(
                "lease ", lease.id,
                " is an evaluation lease: end it with FinishLease"));
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult u,
              tx.Exec(
                  "UPDATE nodes SET calibration_noise = $2, state = CASE WHEN "
                  "state = $5 THEN state ELSE $3 END, updated_at_us = $4 WHERE "
                  "id = $1",
                  {lease.node_id, noise, static_cast<int>(new_state), now,
                   static_cast<int>(v1::DISTRUSTED)}));
          if (u.affected == 0) {
            return absl::FailedPreconditionError(
                absl::StrCat("node ", lease.node_id,
                             " is not registered; register it first"));
          }
          return EndLease(tx, lease, now, v1::FINISHED, "calibrated");
        });
  }

  absl::StatusOr<v1::EvaluationState> FailLease(
      const LeaseRef& ref, absl::string_view error) override {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (error.empty()) return Invalid("error is empty: say what failed");
    const int64_t now = NowUs();
    v1::EvaluationState state = v1::EVALUATION_STATE_UNSPECIFIED;
    DG_RETURN_IF_ERROR(
        Run("FailLease", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(LeaseRow lease, LockLiveLease(tx, ref, now));
          DG_ASSIGN_OR_RETURN(
              state,
              ReleaseJob(tx, lease, kLeaseFailed,
                         absl::StrCat("infrastructure error: ", error), now));
          return absl::OkStatus();
        }));
    return state;
  }

  absl::StatusOr<std::vector<ReclaimedLease>> ReclaimExpiredLeases(
      int limit) override {
    if (limit < 1 || limit > kMaxListLimit) {
      return Invalid(
          absl::StrCat("limit must be in 1..", kMaxListLimit, ", got ", limit));
    }
    const int64_t now = NowUs();
    std::vector<ReclaimedLease> out;
    DG_RETURN_IF_ERROR(Run(
        "ReclaimExpiredLeases", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          out.clear();
          // Leases being renewed or finished right now are skipped; the
          // locked rows are re-checked (READ COMMITTED re-evaluates them).
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  absl::StrCat(
                      "SELECT id, job_id, job_kind, evaluation_id, node_id, "
                      "attempt, state, expires_at_us, end_reason FROM leases "
                      "WHERE state = $1 AND expires_at_us <= $2 ORDER BY "
                      "expires_at_us, id LIMIT $3",
                      pg_ ? " FOR NO KEY UPDATE SKIP LOCKED" : ""),
                  {kLeaseActive, now, limit}));
          for (const SqlRow& row : r.rows) {
            LeaseRow lease = LeaseFromRow(row);
            DG_ASSIGN_OR_RETURN(
                v1::EvaluationState state,
                ReleaseJob(tx, lease, kLeaseExpired,
                           absl::StrCat("lease expired at ",
                                        FormatUs(lease.expires_at_us),
                                        " without a heartbeat from node ",
                                        lease.node_id),
                           now));
            ReclaimedLease rl;
            rl.lease_id = lease.id;
            rl.node_id = lease.node_id;
            rl.evaluation_id = lease.evaluation_id;
            rl.job_id = lease.job_id;
            rl.attempts = lease.attempt;
            rl.new_state = state;
            out.push_back(std::move(rl));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<QueueCounts> CountJobs() override {
    QueueCounts counts;
    DG_RETURN_IF_ERROR(
        Run("CountJobs", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("SELECT state, COUNT(*) FROM jobs GROUP BY state"));
          for (const SqlRow& row : r.rows) {
            switch (row.Int(0)) {
              case kJobQueued:
                counts.queued = row.Int(1);
                break;
              case kJobLeased:
                counts.leased = row.Int(1);
                break;
              case kJobDone:
                counts.done = row.Int(1);
                break;
              case kJobCancelled:
                counts.cancelled = row.Int(1);
                break;
              case kJobDead:
                counts.dead = row.Int(1);
                break;
            }
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult g,
              tx.Exec("SELECT priority_class, priority, req_accelerator_kind, "
                      "COUNT(*) FROM jobs WHERE state = $1 GROUP BY "
                      "priority_class, priority, req_accelerator_kind ORDER BY "
                      "priority_class, priority DESC, req_accelerator_kind",
                      {kJobQueued}));
          for (const SqlRow& row : g.rows) {
            const int64_t cls = row.Int(0);
            counts.queued_by_group.push_back(
                {cls == kClassCalibration ? "calibration"
                 : cls == kClassCi        ? "ci"
                                          : "experiment",
                 static_cast<int32_t>(row.Int(1)), row.Text(2), row.Int(3)});
          }
          return absl::OkStatus();
        }));
    return counts;
  }

  // ---- Stages, samples, verdicts -----------------------------------------

  absl::Status RecordStage(const LeaseRef& ref,
                           const v1::Stage& stage) override {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (stage.kind() == v1::STAGE_KIND_UNSPECIFIED)
      return Invalid("stage.kind is unspecified");
    if (stage.status() == v1::STAGE_STATUS_UNSPECIFIED) {
      return Invalid("stage.status is unspecified");
    }
    if (!Finite(stage.seconds()) || stage.seconds() < 0) {
      return Invalid("stage.seconds must be finite and >= 0");
    }
    const int64_t now = NowUs();
    return Run("RecordStage", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
      DG_ASSIGN_OR_RETURN(LeaseRow lease, SharedLiveLease(tx, ref, now));
      return tx
          .Exec(
              "INSERT INTO stages (evaluation_id, lease_id, attempt, kind, "
              "status, started_at_us, seconds, log_uri, summary, "
              "recorded_at_us, proto) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, "
              "$9, $10, $11)",
              {lease.evaluation_id, lease.id, lease.attempt,
               static_cast<int>(stage.kind()), static_cast<int>(stage.status()),
               stage.has_started_at() ? FromProto(stage.started_at())
                                      : int64_t{0},
               stage.seconds(), stage.log_uri(), stage.summary(), now,
               Bytes{stage.SerializeAsString()}})
          .status();
    });
  }

  absl::StatusOr<std::vector<StageRecord>> ListStages(
      absl::string_view evaluation_id) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    std::vector<StageRecord> out;
    DG_RETURN_IF_ERROR(
        Run("ListStages", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  "SELECT id, lease_id, attempt, recorded_at_us, proto FROM "
                  "stages WHERE evaluation_id = $1 ORDER BY id",
                  {evaluation_id}));
          for (const SqlRow& row : r.rows) {
            StageRecord rec;
            rec.id = row.Int(0);
            rec.evaluation_id = std::string(evaluation_id);
            rec.lease_id = row.Text(1);
            rec.attempt = static_cast<int32_t>(row.Int(2));
            rec.recorded_at = FromUs(row.Int(3));
            DG_ASSIGN_OR_RETURN(rec.stage,
                                Parse<v1::Stage>(row.Bytes(4), "stage"));
            out.push_back(std::move(rec));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<std::vector<int64_t>> AppendSamples(
      const LeaseRef& ref, absl::Span<const v1::Sample> samples) override {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (samples.empty()) return Invalid("no samples to append");
    std::set<std::tuple<std::string, int, int>> keys;
    for (size_t i = 0; i < samples.size(); ++i) {
      const v1::Sample& s = samples[i];
      const std::string at = absl::StrCat("samples[", i, "]");
      if (s.id() != 0)
        return Invalid(absl::StrCat(at, ".id is set; the store assigns ids"));
      if (s.metric().empty())
        return Invalid(absl::StrCat(at, ".metric is empty"));
      if (s.arm() != v1::BASELINE && s.arm() != v1::CANDIDATE) {
        return Invalid(absl::StrCat(at, ".arm must be BASELINE or CANDIDATE"));
      }
      if (s.pair_index() < 0)
        return Invalid(absl::StrCat(at, ".pair_index is negative"));
      if (!Finite(s.value()) || !Finite(s.process_wall_seconds()) ||
          !Finite(s.process_cpu_seconds())) {
        return Invalid(
            absl::StrCat(at, ": value and process times must be finite"));
      }
      if (!keys.insert({s.metric(), s.arm(), s.pair_index()}).second) {
        return Invalid(absl::StrCat(at, " repeats metric '", s.metric(), "' ",
                                    v1::Arm_Name(s.arm()), " pair ",
                                    s.pair_index(), " of an earlier sample"));
      }
    }
    const int64_t now = NowUs();
    std::vector<int64_t> ids;
    DG_RETURN_IF_ERROR(
        Run("AppendSamples", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          ids.clear();
          DG_ASSIGN_OR_RETURN(LeaseRow lease, SharedLiveLease(tx, ref, now));
          for (size_t i = 0; i < samples.size(); ++i) {
            const v1::Sample& s = samples[i];
            if (!s.evaluation_id().empty() &&
                s.evaluation_id() != lease.evaluation_id) {
              return Invalid(absl::StrCat("samples[", i, "].evaluation_id ",
                                          s.evaluation_id(), " is not lease ",
                                          lease.id, "'s evaluation ",
                                          lease.evaluation_id));
            }
            DG_ASSIGN_OR_RETURN(
                SqlResult r,
                tx.Exec(
                    "INSERT INTO samples (evaluation_id, lease_id, metric, "
                    "arm, "
                    "pair_index, value, unit, process_wall_seconds, "
                    "process_cpu_seconds, recorded_at_us) VALUES ($1, $2, $3, "
                    "$4, $5, $6, $7, $8, $9, $10) RETURNING id",
                    {lease.evaluation_id, lease.id, s.metric(),
                     static_cast<int>(s.arm()), s.pair_index(), s.value(),
                     s.unit(), s.process_wall_seconds(),
                     s.process_cpu_seconds(),
                     s.has_recorded_at() ? FromProto(s.recorded_at()) : now}));
            ids.push_back(r.rows.at(0).Int(0));
          }
          return absl::OkStatus();
        }));
    return ids;
  }

  absl::StatusOr<std::vector<v1::Sample>> ListSamples(
      absl::string_view evaluation_id) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    std::vector<v1::Sample> out;
    DG_RETURN_IF_ERROR(
        Run("ListSamples", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  "SELECT id, metric, arm, pair_index, value, unit, "
                  "process_wall_seconds, process_cpu_seconds, recorded_at_us "
                  "FROM samples WHERE evaluation_id = $1 ORDER BY id",
                  {evaluation_id}));
          for (const SqlRow& row : r.rows) {
            v1::Sample s;
            s.set_id(row.Int(0));
            s.set_evaluation_id(std::string(evaluation_id));
            s.set_metric(row.Text(1));
            s.set_arm(static_cast<v1::Arm>(row.Int(2)));
            s.set_pair_index(static_cast<int32_t>(row.Int(3)));
            s.set_value(row.Double(4));
            s.set_unit(row.Text(5));
            s.set_process_wall_seconds(row.Double(6));
            s.set_process_cpu_seconds(row.Double(7));
            *s.mutable_recorded_at() = ToProto(row.Int(8));
            out.push_back(std::move(s));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<v1::Verdict> GetVerdict(
      absl::string_view evaluation_id) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    v1::Verdict out;
    DG_RETURN_IF_ERROR(
        Run("GetVerdict", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("SELECT proto, candidate_id FROM verdicts WHERE "
                      "evaluation_id = $1",
                      {evaluation_id}));
          if (r.rows.empty()) {
            DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
            return absl::NotFoundError(absl::StrCat(
                "evaluation ", evaluation_id, " has no verdict yet"));
          }
          DG_ASSIGN_OR_RETURN(
              out, Parse<v1::Verdict>(r.rows[0].Bytes(0), "verdict"));
          out.set_evaluation_id(std::string(evaluation_id));
          out.set_candidate_id(r.rows[0].Text(1));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<std::vector<MetricComparisonRecord>> ListMetricComparisons(
      const MetricHistoryFilter& filter) override {
    if (filter.metric.empty() && filter.evaluation_id.empty()) {
      return Invalid("set metric or evaluation_id");
    }
    if (filter.limit < 1 || filter.limit > kMaxListLimit) {
      return Invalid(absl::StrCat("limit must be in 1..", kMaxListLimit));
    }
    std::string sql =
        "SELECT m.evaluation_id, v.candidate_id, r.url, m.metric, m.unit, "
        "m.direction, m.is_primary, m.baseline, m.candidate, m.speedup, "
        "m.ci_low, m.ci_high, m.n_pairs, m.p_value, m.significant, "
        "m.flagged_for_review, m.decided_at_us, m.proto FROM "
        "metric_comparisons m JOIN "
        "verdicts v ON v.evaluation_id = m.evaluation_id JOIN evaluations e ON "
        "e.id = m.evaluation_id JOIN repos r ON r.id = e.repo_id WHERE 1 = 1";
    std::vector<SqlValue> args;
    auto arg = [&](SqlValue v) {
      args.push_back(std::move(v));
      return absl::StrCat("$", args.size());
    };
    if (!filter.metric.empty())
      absl::StrAppend(&sql, " AND m.metric = ", arg(filter.metric));
    if (!filter.evaluation_id.empty()) {
      absl::StrAppend(&sql,
                      " AND m.evaluation_id = ", arg(filter.evaluation_id));
    }
    if (!filter.repo.empty())
      absl::StrAppend(&sql, " AND r.url = ", arg(filter.repo));
    if (filter.since != absl::InfinitePast()) {
      absl::StrAppend(&sql, " AND m.decided_at_us >= ",
                      arg(absl::ToUnixMicros(filter.since)));
    }
    absl::StrAppend(
        &sql, " ORDER BY m.decided_at_us, m.evaluation_id, m.metric LIMIT ",
        arg(filter.limit));
    std::vector<MetricComparisonRecord> out;
    DG_RETURN_IF_ERROR(Run(
        "ListMetricComparisons", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
          for (const SqlRow& row : r.rows) {
            MetricComparisonRecord rec;
            rec.evaluation_id = row.Text(0);
            rec.candidate_id = row.Text(1);
            rec.repo = row.Text(2);
            // The stored message carries every field; the columns are for
            // queries.
            DG_ASSIGN_OR_RETURN(rec.comparison,
                                Parse<v1::MetricComparison>(
                                    row.Bytes(17), "metric comparison"));
            rec.decided_at = FromUs(row.Int(16));
            out.push_back(std::move(rec));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  // ---- Nodes -------------------------------------------------------------

  absl::StatusOr<v1::Node> RegisterNode(
      absl::string_view name, const v1::NodeDimensions& dims) override {
    if (name.empty()) return Invalid("node name is empty");
    if (dims.fingerprint().empty()) {
      return Invalid(
          "dimensions.fingerprint is empty: samples are only comparable "
          "within one fingerprint");
    }
    if (dims.accelerator_count() < 0 || dims.accelerator_memory_bytes() < 0 ||
        dims.cpu_cores() < 0 || dims.memory_bytes() < 0) {
      return Invalid("dimensions have a negative count or size");
    }
    const int64_t now = NowUs();
    v1::Node out;
    DG_RETURN_IF_ERROR(
        Run("RegisterNode", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          const std::string new_id = NewId("node");
          DG_ASSIGN_OR_RETURN(
              SqlResult ins,
              tx.Exec(
                  "INSERT INTO nodes (id, name, accelerator_kind, "
                  "accelerator_count, accelerator_memory_bytes, fingerprint, "
                  "dimensions, state, calibration_noise, last_heartbeat_us, "
                  "registered_at_us, updated_at_us) VALUES ($1, $2, $3, $4, "
                  "$5, "
                  "$6, $7, $8, 0, $9, $9, $9) ON CONFLICT (name) DO NOTHING",
                  {new_id, name, dims.accelerator_kind(),
                   dims.accelerator_count(), dims.accelerator_memory_bytes(),
                   dims.fingerprint(), Bytes{dims.SerializeAsString()},
                   static_cast<int>(v1::CALIBRATING), now}));
          std::string id = new_id;
          if (ins.affected == 0) {
            DG_ASSIGN_OR_RETURN(
                SqlResult r,
                tx.Exec(absl::StrCat("SELECT id FROM nodes WHERE name = $1",
                                     ForUpdate()),
                        {name}));
            if (r.rows.empty()) {
              return absl::InternalError(
                  absl::StrCat("node ", name, " vanished"));
            }
            id = r.rows[0].Text(0);
            // A new fingerprint (other hardware or toolchain) needs a new
            // calibration.
            DG_RETURN_IF_ERROR(
                tx.Exec(
                      "UPDATE nodes SET accelerator_kind = $2, "
                      "accelerator_count = $3, accelerator_memory_bytes = $4, "
                      "state = CASE WHEN state = $9 THEN state WHEN fingerprint "
                      "<> $5 THEN $8 ELSE state END, "
                      "calibration_noise = CASE WHEN fingerprint <> $5 THEN 0 "
                      "ELSE calibration_noise END, fingerprint = $5, "
                      "dimensions "
                      "= $6, last_heartbeat_us = $7, updated_at_us = $7 WHERE "
                      "id "
                      "= $1",
                      {id, dims.accelerator_kind(), dims.accelerator_count(),
                       dims.accelerator_memory_bytes(), dims.fingerprint(),
                       Bytes{dims.SerializeAsString()}, now,
                       static_cast<int>(v1::CALIBRATING),
                       static_cast<int>(v1::DISTRUSTED)})
                    .status());
          }
          DG_ASSIGN_OR_RETURN(out, LoadNode(tx, id));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<v1::Node> GetNode(absl::string_view node_id) override {
    if (node_id.empty()) return Invalid("node id is empty");
    v1::Node out;
    // One SELECT: on PostgreSQL in autocommit (one round trip instead of
    // three; every Synchronize reads its node).
    const TxMode mode = pg_ ? TxMode::kSingleStatement : TxMode::kRead;
    DG_RETURN_IF_ERROR(
        Run("GetNode", mode, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(out, LoadNode(tx, node_id));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<std::vector<v1::Node>> ListNodes(
      absl::Span<const v1::NodeState> states) override {
    std::string sql = absl::StrCat(kNodeSelect, " WHERE 1 = 1");
    std::vector<SqlValue> args;
    if (!states.empty()) {
      std::vector<std::string> ps;
      for (v1::NodeState s : states) {
        if (s == v1::NODE_STATE_UNSPECIFIED)
          return Invalid("states contains NODE_STATE_UNSPECIFIED");
        args.push_back(static_cast<int>(s));
        ps.push_back(absl::StrCat("$", args.size()));
      }
      absl::StrAppend(&sql, " AND n.state IN (", absl::StrJoin(ps, ", "), ")");
    }
    absl::StrAppend(&sql, " ORDER BY n.name");
    std::vector<v1::Node> out;
    DG_RETURN_IF_ERROR(
        Run("ListNodes", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
          for (const SqlRow& row : r.rows) {
            DG_ASSIGN_OR_RETURN(v1::Node n, NodeFromRow(row));
            out.push_back(std::move(n));
          }
          return absl::OkStatus();
        }));
    return out;
  }

  absl::Status SetNodeState(absl::string_view node_id,
                            v1::NodeState state) override {
    if (node_id.empty()) return Invalid("node id is empty");
    if (state == v1::NODE_STATE_UNSPECIFIED || !v1::NodeState_IsValid(state)) {
      return Invalid("node state is unspecified");
    }
    const int64_t now = NowUs();
    return Run("SetNodeState", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
      DG_ASSIGN_OR_RETURN(
          SqlResult r,
          tx.Exec(
              "UPDATE nodes SET state = $2, updated_at_us = $3 WHERE id = $1 "
              "AND (state <> $4 OR $2 = $4)",
              {node_id, static_cast<int>(state), now,
               static_cast<int>(v1::DISTRUSTED)}));
      if (r.affected > 0) return absl::OkStatus();
      DG_ASSIGN_OR_RETURN(
          SqlResult known,
          tx.Exec("SELECT 1 FROM nodes WHERE id = $1", {node_id}));
      if (known.rows.empty()) {
        return absl::NotFoundError(
            absl::StrCat("node ", node_id, " not found"));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", node_id, " is distrusted, which is final"));
    });
  }

  absl::Status RecordNodeHeartbeat(absl::string_view node_id) override {
    if (node_id.empty()) return Invalid("node id is empty");
    const int64_t now = NowUs();
    return Run(
        "RecordNodeHeartbeat", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("UPDATE nodes SET last_heartbeat_us = $2 WHERE id = $1",
                      {node_id, now}));
          if (r.affected == 0) {
            return absl::NotFoundError(
                absl::StrCat("node ", node_id, " not found"));
          }
          return absl::OkStatus();
        });
  }

  // ---- Merge queue -------------------------------------------------------

  absl::StatusOr<MergeEntry> EnqueueMerge(absl::string_view evaluation_id,
                                          absl::string_view actor) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    if (actor.empty()) return Invalid("actor is empty");
    const int64_t now = NowUs();
    MergeEntry out;
    DG_RETURN_IF_ERROR(
        Run("EnqueueMerge", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  "SELECT e.repo_id, c.target_branch, v.decision FROM "
                  "evaluations e JOIN candidates c ON c.id = e.candidate_id "
                  "LEFT JOIN verdicts v ON v.evaluation_id = e.id WHERE e.id = "
                  "$1",
                  {evaluation_id}));
          if (r.rows.empty()) {
            return absl::NotFoundError(
                absl::StrCat("evaluation ", evaluation_id, " not found"));
          }
          const SqlRow& row = r.rows[0];
          if (row.IsNull(2) || row.Int(2) != v1::ACCEPT) {
            return absl::FailedPreconditionError(absl::StrCat(
                "evaluation ", evaluation_id, " has ",
                row.IsNull(2)
                    ? "no verdict"
                    : absl::StrCat("decision ",
                                   v1::Decision_Name(
                                       static_cast<v1::Decision>(row.Int(2)))),
                "; only ACCEPTed candidates enter the merge queue"));
          }
          const std::string branch = row.Text(1);
          if (branch.empty()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "evaluation ", evaluation_id,
                "'s candidate names no target_branch to merge into"));
          }
          DG_ASSIGN_OR_RETURN(
              SqlResult ins,
              tx.Exec(
                  "INSERT INTO merge_queue (evaluation_id, repo_id, "
                  "target_branch, state, created_at_us, updated_at_us) VALUES "
                  "($1, $2, $3, $4, $5, $5) ON CONFLICT (evaluation_id) DO "
                  "NOTHING",
                  {evaluation_id, row.Int(0), branch,
                   static_cast<int>(v1::MERGE_QUEUED), now}));
          if (ins.affected == 0) {
            return absl::AlreadyExistsError(
                absl::StrCat("evaluation ", evaluation_id,
                             " is already in the merge queue"));
          }
          DG_RETURN_IF_ERROR(AuditTx(tx, now, actor, "merge.enqueue",
                                     evaluation_id,
                                     absl::StrCat("branch ", branch)));
          DG_ASSIGN_OR_RETURN(out, LoadMerge(tx, evaluation_id));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<MergeEntry> UpdateMerge(absl::string_view evaluation_id,
                                         const v1::MergeStatus& status,
                                         absl::string_view actor) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    if (actor.empty()) return Invalid("actor is empty");
    switch (status.state()) {
      case v1::MERGE_QUEUED:
      case v1::MERGE_FAILED:
        break;
      case v1::REMEASURING:
        if (status.remeasure_evaluation_id().empty()) {
          return Invalid("REMEASURING needs remeasure_evaluation_id");
        }
        break;
      case v1::MERGED:
        if (status.merged_sha().empty())
          return Invalid("MERGED needs merged_sha");
        break;
      default:
        return Invalid(absl::StrCat(
            "merge state must be MERGE_QUEUED, REMEASURING, MERGED or "
            "MERGE_FAILED, got ",
            v1::MergeState_Name(status.state())));
    }
    const int64_t now = NowUs();
    MergeEntry out;
    DG_RETURN_IF_ERROR(
        Run("UpdateMerge", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec(
                  absl::StrCat(
                      "SELECT state FROM merge_queue WHERE evaluation_id = $1",
                      ForUpdate()),
                  {evaluation_id}));
          if (r.rows.empty()) {
            return absl::NotFoundError(absl::StrCat(
                "evaluation ", evaluation_id, " is not in the merge queue"));
          }
          const int cur = static_cast<int>(r.rows[0].Int(0));
          if (cur == v1::MERGED || cur == v1::MERGE_FAILED) {
            return absl::FailedPreconditionError(absl::StrCat(
                "the merge of evaluation ", evaluation_id, " already ended (",
                v1::MergeState_Name(static_cast<v1::MergeState>(cur)),
                "); enqueue a new evaluation instead"));
          }
          if (!status.remeasure_evaluation_id().empty()) {
            DG_ASSIGN_OR_RETURN(
                SqlResult e, tx.Exec("SELECT id FROM evaluations WHERE id = $1",
                                     {status.remeasure_evaluation_id()}));
            if (e.rows.empty()) {
              return Invalid(absl::StrCat("remeasure_evaluation_id ",
                                          status.remeasure_evaluation_id(),
                                          " names no evaluation"));
            }
          }
          DG_RETURN_IF_ERROR(
              tx.Exec("UPDATE merge_queue SET state = $2, merged_sha = "
                      "COALESCE(NULLIF($3, ''), merged_sha), "
                      "remeasure_evaluation_id = COALESCE(NULLIF($4, ''), "
                      "remeasure_evaluation_id), message = $5, updated_at_us = "
                      "$6 WHERE evaluation_id = $1",
                      {evaluation_id, static_cast<int>(status.state()),
                       status.merged_sha(), status.remeasure_evaluation_id(),
                       status.message(), now})
                  .status());
          DG_RETURN_IF_ERROR(AuditTx(
              tx, now, actor, "merge.update", evaluation_id,
              absl::StrCat(
                  v1::MergeState_Name(status.state()),
                  status.merged_sha().empty() ? "" : " ", status.merged_sha(),
                  status.message().empty() ? "" : ": ", status.message())));
          DG_ASSIGN_OR_RETURN(out, LoadMerge(tx, evaluation_id));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<MergeEntry> GetMergeEntry(
      absl::string_view evaluation_id) override {
    if (evaluation_id.empty()) return Invalid("evaluation id is empty");
    MergeEntry out;
    DG_RETURN_IF_ERROR(
        Run("GetMergeEntry", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(out, LoadMerge(tx, evaluation_id));
          return absl::OkStatus();
        }));
    return out;
  }

  absl::StatusOr<std::vector<MergeEntry>> ListMergeQueue(
      const MergeQueueFilter& filter) override {
    std::string sql = absl::StrCat(kMergeSelect, " WHERE 1 = 1");
    std::vector<SqlValue> args;
    auto arg = [&](SqlValue v) {
      args.push_back(std::move(v));
      return absl::StrCat("$", args.size());
    };
    if (!filter.repo.empty())
      absl::StrAppend(&sql, " AND r.url = ", arg(filter.repo));
    if (!filter.target_branch.empty()) {
      absl::StrAppend(&sql,
                      " AND m.target_branch = ", arg(filter.target_branch));
    }
    std::vector<v1::MergeState> states = filter.states;
    if (states.empty()) states = {v1::MERGE_QUEUED, v1::REMEASURING};
    std::vector<std::string> ps;
    for (v1::MergeState s : states) ps.push_back(arg(static_cast<int>(s)));
    absl::StrAppend(&sql, " AND m.state IN (", absl::StrJoin(ps, ", "),
                    ") ORDER BY m.position");
    std::vector<MergeEntry> out;
    DG_RETURN_IF_ERROR(
        Run("ListMergeQueue", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
          for (const SqlRow& row : r.rows) out.push_back(MergeFromRow(row));
          return absl::OkStatus();
        }));
    return out;
  }

  // ---- Audit -------------------------------------------------------------

  absl::StatusOr<int64_t> AppendAudit(const AuditEntry& entry) override {
    if (entry.actor.empty()) return Invalid("audit entry needs an actor");
    if (entry.action.empty()) return Invalid("audit entry needs an action");
    const int64_t now = NowUs();
    int64_t id = 0;
    DG_RETURN_IF_ERROR(
        Run("AppendAudit", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(
              SqlResult r,
              tx.Exec("INSERT INTO audit_log (at_us, actor, action, subject, "
                      "detail) VALUES ($1, $2, $3, $4, $5) RETURNING id",
                      {now, entry.actor, entry.action, entry.subject,
                       entry.detail}));
          id = r.rows.at(0).Int(0);
          return absl::OkStatus();
        }));
    return id;
  }

  absl::StatusOr<std::vector<AuditEntry>> ListAudit(
      const AuditFilter& filter) override {
    if (filter.limit < 1 || filter.limit > kMaxListLimit) {
      return Invalid(absl::StrCat("limit must be in 1..", kMaxListLimit));
    }
    if (filter.after_id < 0) return Invalid("after_id must be >= 0");
    std::string sql =
        "SELECT id, at_us, actor, action, subject, detail FROM audit_log "
        "WHERE id > $1";
    std::vector<SqlValue> args = {filter.after_id};
    auto arg = [&](SqlValue v) {
      args.push_back(std::move(v));
      return absl::StrCat("$", args.size());
    };
    if (!filter.actor.empty())
      absl::StrAppend(&sql, " AND actor = ", arg(filter.actor));
    if (!filter.subject.empty()) {
      absl::StrAppend(&sql, " AND subject = ", arg(filter.subject));
    }
    if (filter.since != absl::InfinitePast()) {
      absl::StrAppend(&sql,
                      " AND at_us >= ", arg(absl::ToUnixMicros(filter.since)));
    }
    absl::StrAppend(&sql, " ORDER BY id LIMIT ", arg(filter.limit));
    std::vector<AuditEntry> out;
    DG_RETURN_IF_ERROR(
        Run("ListAudit", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
          DG_ASSIGN_OR_RETURN(SqlResult r, tx.Exec(sql, args));
          for (const SqlRow& row : r.rows) {
            AuditEntry e;
            e.id = row.Int(0);
            e.at = FromUs(row.Int(1));
            e.actor = row.Text(2);
            e.action = row.Text(3);
            e.subject = row.Text(4);
            e.detail = row.Text(5);
            out.push_back(std::move(e));
          }
          return absl::OkStatus();
        }));
    return out;
  }

 private:
  // Columns of kEvaluationSelect, in order.
  static constexpr int kEvalSeqColumn = 12;
  static constexpr char kEvaluationSelect[] =
      "SELECT e.id, e.state, e.node_id, e.attempt, e.created_at_us, "
      "e.updated_at_us, c.proto, v.proto, m.state, m.merged_sha, "
      "m.remeasure_evaluation_id, m.message, e.seq FROM evaluations e JOIN "
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
      "m.updated_at_us FROM merge_queue m JOIN repos r ON r.id = m.repo_id";

  // Claim parameters: $1 accelerator kind, $2 count, $3 memory,
  // $4 fingerprint, $5 node id; then PostgreSQL: $6 now, $7 expiry (the
  // limit is in the text); SQLite: $6 limit. A job with a noise limit goes
  // only to a node whose last calibration is within it.
  static constexpr char kPgClaim[] =
      "WITH picked AS ("
      " SELECT id FROM jobs WHERE state = 1"
      " AND (req_accelerator_kind = '' OR req_accelerator_kind = $1)"
      " AND req_min_accelerator_count <= $2"
      " AND req_min_accelerator_memory <= $3"
      " AND (req_fingerprint = '' OR req_fingerprint = $4)"
      " AND (req_node_id = '' OR req_node_id = $5)"
      " AND (req_max_node_noise = 0 OR req_max_node_noise >="
      " (SELECT calibration_noise FROM nodes WHERE id = $5))"
      " ORDER BY priority_class, priority DESC, id LIMIT @LIMIT@"
      " FOR UPDATE SKIP LOCKED),"
      " claimed AS ("
      " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
      " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
      " updated_at_us = $6 FROM picked WHERE jobs.id = picked.id"
      " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
      " jobs.current_lease_id, jobs.priority_class, jobs.priority),"
      " leased AS ("
      " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
      " attempt, state, granted_at_us, expires_at_us)"
      " SELECT current_lease_id, id, kind, evaluation_id, CAST($5 AS TEXT),"
      " attempts, 1, CAST($6 AS BIGINT), CAST($7 AS BIGINT) FROM claimed),"
      " running AS ("
      " UPDATE evaluations SET state = 2, node_id = $5,"
      " attempt = claimed.attempts, updated_at_us = $6"
      " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
      " SELECT cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
      " cl.current_lease_id, cl.priority_class, cl.priority, e.created_at_us,"
      " c.proto FROM claimed cl LEFT JOIN evaluations e ON e.id ="
      " cl.evaluation_id LEFT JOIN candidates c ON c.id = e.candidate_id";
  static constexpr char kSqliteClaim[] =
      "SELECT id, kind, evaluation_id, attempts, priority_class, priority"
      " FROM jobs WHERE state = 1"
      " AND (req_accelerator_kind = '' OR req_accelerator_kind = $1)"
      " AND req_min_accelerator_count <= $2"
      " AND req_min_accelerator_memory <= $3"
      " AND (req_fingerprint = '' OR req_fingerprint = $4)"
      " AND (req_node_id = '' OR req_node_id = $5)"
      " AND (req_max_node_noise = 0 OR req_max_node_noise >="
      " (SELECT calibration_noise FROM nodes WHERE id = $5))"
      " ORDER BY priority_class, priority DESC, id LIMIT $6";

  // What both finish statements (PgFinish, kPgFinishAndClaimBatch) write
  // besides the lease: `j` and `e` end the job and the evaluation of each
  // lease in `l` at time `now` (a parameter); kVerdictInsert and
  // kComparisonInsert head the verdict's and its comparisons' inserts,
  // which add their values (the comparisons, decided_at_us and m.proto).
  static std::string EndJobAndEvaluation(absl::string_view now) {
    return absl::StrCat(
        " j AS (UPDATE jobs SET state = 3, updated_at_us = ", now,
        " FROM l WHERE jobs.id = l.job_id RETURNING jobs.id),"
        " e AS (UPDATE evaluations SET state = 3, updated_at_us = ",
        now,
        " FROM l WHERE evaluations.id = l.evaluation_id"
        " RETURNING evaluations.id, evaluations.candidate_id),");
  }
  static constexpr char kVerdictInsert[] =
      "INSERT INTO verdicts (evaluation_id, candidate_id, lease_id,"
      " decision, policy, manifest_hash, node_id, node_fingerprint,"
      " software_version, statistics_seed, decided_at_us, proto)";
  static constexpr char kComparisonInsert[] =
      "INSERT INTO metric_comparisons (evaluation_id, metric, unit,"
      " direction, is_primary, baseline, candidate, speedup, ci_low, ci_high,"
      " n_pairs, p_value, significant, flagged_for_review, decided_at_us,"
      " proto)"
      " SELECT l.evaluation_id, m.metric, m.unit, m.direction, m.is_primary,"
      " m.baseline, m.candidate, m.speedup, m.ci_low, m.ci_high, m.n_pairs,"
      " m.p_value, m.significant, m.flagged";
  static constexpr char kPgFinishCount[] = " SELECT count(*) FROM l";

  // PostgreSQL's FinishLease in one round trip: ends the lease, the job and
  // the evaluation and writes the verdict, its samples and comparisons, all
  // only if the lease is live, held by the node ($2), an evaluation lease,
  // and the verdict names its own evaluation, candidate and samples; counts
  // the leases it ended (0: nothing written). Lock order as everywhere: the
  // lease, then the job, then the evaluation. Foreign keys to the new
  // verdict are checked at the end of the statement.
  static const std::string& PgFinish() {
    static const std::string* text = new std::string(absl::StrCat(
        "WITH l AS ("
        " UPDATE leases SET state = 2, ended_at_us = $3,"
        " end_reason = 'finished'"
        " WHERE id = $1 AND node_id = $2 AND state = 1 AND expires_at_us > $3"
        " AND job_kind = 1"
        " AND ($4 = '' OR evaluation_id = $4)"
        " AND ($5 = '' OR $5 = (SELECT candidate_id FROM evaluations"
        " WHERE evaluations.id = leases.evaluation_id))"
        " AND NOT EXISTS (SELECT 1 FROM unnest(CAST($6 AS BIGINT[])) AS s(id)"
        " WHERE NOT EXISTS (SELECT 1 FROM samples WHERE samples.id = s.id"
        " AND samples.evaluation_id = leases.evaluation_id))"
        " RETURNING id, job_id, evaluation_id),",
        EndJobAndEvaluation("$3"), " v AS (", kVerdictInsert,
        " SELECT e.id, e.candidate_id, l.id, CAST($7 AS INTEGER),"
        " CAST($8 AS INTEGER), CAST($9 AS TEXT), CAST($10 AS TEXT),"
        " CAST($11 AS TEXT), CAST($12 AS TEXT), CAST($13 AS BIGINT),"
        " CAST($14 AS BIGINT), CAST($15 AS BYTEA) FROM e, l),"
        " vs AS (INSERT INTO verdict_samples (evaluation_id, sample_id)"
        " SELECT l.evaluation_id, s.id FROM l,"
        " unnest(CAST($6 AS BIGINT[])) AS s(id)),"
        " mc AS (",
        kComparisonInsert, ", CAST($14 AS BIGINT), m.proto FROM l, unnest(",
        PgComparisonArrays::Casts(16), ") AS m(", PgComparisonArrays::kNames,
        "))", kPgFinishCount));
    return *text;
  }
  // PgFinish(), then kPgClaim's claim of one job for the lease's node, only
  // when the lease was ended and the node is ACTIVE (2), with its registered
  // dimensions; $30: the new lease's expiry. One row per claimed job, or one
  // with NULLs: the count of ended leases, the node's state, kPgClaim's
  // columns. The finish and the claim touch different jobs and evaluations
  // (the claim's job was queued when the statement began). The finish's
  // updates run first (the claim's scan is gated on them): a FOR UPDATE
  // SKIP LOCKED scan keeps its lock on a row it re-checked and passed over
  // (a job another statement claimed meanwhile), and that job's finish waits
  // for the lock; were a statement's finish to wait after its own scan, two
  // statements could each wait for the other.
  static constexpr char kPgClaimAfterFinish[] =
      ", n AS (SELECT state, accelerator_kind, accelerator_count,"
      " accelerator_memory_bytes, fingerprint, calibration_noise FROM nodes"
      " WHERE id = $2),"
      " picked AS ("
      " SELECT id FROM jobs WHERE state = 1"
      " AND (SELECT count(*) FROM j) = 1 AND (SELECT count(*) FROM e) = 1"
      " AND (SELECT state FROM n) = 2"
      " AND (req_accelerator_kind = ''"
      " OR req_accelerator_kind = (SELECT accelerator_kind FROM n))"
      " AND req_min_accelerator_count <= (SELECT accelerator_count FROM n)"
      " AND req_min_accelerator_memory <="
      " (SELECT accelerator_memory_bytes FROM n)"
      " AND (req_fingerprint = '' OR req_fingerprint = (SELECT fingerprint"
      " FROM n))"
      " AND (req_node_id = '' OR req_node_id = $2)"
      " AND (req_max_node_noise = 0"
      " OR req_max_node_noise >= (SELECT calibration_noise FROM n))"
      " ORDER BY priority_class, priority DESC, id LIMIT 1"
      " FOR UPDATE SKIP LOCKED),"
      " claimed AS ("
      " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
      " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
      " updated_at_us = $3 FROM picked WHERE jobs.id = picked.id"
      " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
      " jobs.current_lease_id, jobs.priority_class, jobs.priority),"
      " leased AS ("
      " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
      " attempt, state, granted_at_us, expires_at_us)"
      " SELECT current_lease_id, id, kind, evaluation_id, CAST($2 AS TEXT),"
      " attempts, 1, CAST($3 AS BIGINT), CAST($30 AS BIGINT) FROM claimed),"
      " running AS ("
      " UPDATE evaluations SET state = 2, node_id = $2,"
      " attempt = claimed.attempts, updated_at_us = $3"
      " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
      " SELECT (SELECT count(*) FROM l), (SELECT state FROM n),"
      " cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
      " cl.current_lease_id, cl.priority_class, cl.priority, e.created_at_us,"
      " c.proto FROM (SELECT 1) AS one LEFT JOIN claimed cl ON true"
      " LEFT JOIN evaluations e ON e.id = cl.evaluation_id"
      " LEFT JOIN candidates c ON c.id = e.candidate_id";
  static_assert(v1::ACTIVE == 2, "kPgClaimAfterFinish names ACTIVE as 2");
  static const std::string& PgFinishAndClaim() {
    static const std::string* text = new std::string(absl::StrCat(
        absl::StripSuffix(PgFinish(), kPgFinishCount), kPgClaimAfterFinish));
    return *text;
  }

  // FinishLeaseAndClaimNext for a batch of leases in one round trip
  // (BatchTurn): PgFinish() for each, then, for each lease ended whose node
  // is ACTIVE (2), the claim of one job matching the node's registered
  // dimensions. $1: now. One element per lease in $2-$15: lease, node,
  // evaluation and candidate the verdict names, the verdict's columns (as
  // PgFinish()'s $7-$15), the new lease's expiry. The verdicts' samples and
  // metric comparisons are flattened, each element naming its lease by
  // position (1-based): $16-$17 and $18-$32. The claim's LIMIT (@LIMIT@, the
  // batch size) is in the text, as in kPgClaim; @FINISH@ stands for the
  // writes it shares with PgFinish() (EndJobAndEvaluation and the verdict's
  // inserts).
  //
  // One scan claims for the whole batch, job i to the i-th node in arrival
  // order, which is only right when the nodes match the same jobs: all of
  // the same dimensions and no queued job pinned to one of them. Otherwise
  // nothing is claimed and `batched` says so (the caller claims for each).
  // As in a single finish and claim, the finish's updates run before the
  // scan (the scan is gated on them): a FOR UPDATE SKIP LOCKED scan keeps its
  // lock on a row it re-checked and passed over (a job another statement
  // claimed meanwhile), and that job's finish waits for the lock; were a
  // statement's finish to wait after its own scan, two statements could
  // each wait for the other.
  //
  // One row per lease, in batch order: its position, whether it was ended,
  // the node's state, `batched`, then kPgClaim's columns (NULL when no job
  // was claimed for it).
  static constexpr char kPgFinishAndClaimBatch[] =
      "WITH i AS (SELECT * FROM unnest(CAST($2 AS TEXT[]), CAST($3 AS TEXT[]),"
      " CAST($4 AS TEXT[]), CAST($5 AS TEXT[]), CAST($6 AS INTEGER[]),"
      " CAST($7 AS INTEGER[]), CAST($8 AS TEXT[]), CAST($9 AS TEXT[]),"
      " CAST($10 AS TEXT[]), CAST($11 AS TEXT[]), CAST($12 AS BIGINT[]),"
      " CAST($13 AS BIGINT[]), CAST($14 AS BYTEA[]), CAST($15 AS BIGINT[]))"
      " WITH ORDINALITY AS i(lease_id, node_id, evaluation_id, candidate_id,"
      " decision, policy, manifest_hash, provenance_node_id, node_fingerprint,"
      " software_version, statistics_seed, decided_at_us, proto,"
      " expires_at_us, item)),"
      " s AS (SELECT * FROM unnest(CAST($16 AS INTEGER[]),"
      " CAST($17 AS BIGINT[])) AS s(item, id)),"
      " found AS (SELECT i.item, hit.tid FROM i, LATERAL (SELECT ctid AS tid"
      " FROM leases WHERE leases.id = i.lease_id LIMIT 1) AS hit),"
      " l AS ("
      " UPDATE leases SET state = 2, ended_at_us = $1, end_reason = 'finished'"
      " FROM found JOIN i ON i.item = found.item"
      " WHERE leases.ctid = found.tid AND (SELECT"
      " leases.node_id = i.node_id AND leases.state = 1"
      " AND leases.expires_at_us > $1 AND leases.job_kind = 1"
      " AND (i.evaluation_id = '' OR leases.evaluation_id = i.evaluation_id)"
      " AND (i.candidate_id = '' OR i.candidate_id = (SELECT candidate_id"
      " FROM evaluations WHERE evaluations.id = leases.evaluation_id))"
      " AND NOT EXISTS (SELECT 1 FROM s WHERE s.item = i.item AND NOT EXISTS"
      " (SELECT 1 FROM samples WHERE samples.id = s.id"
      " AND samples.evaluation_id = leases.evaluation_id)))"
      " RETURNING leases.id, leases.job_id, leases.evaluation_id,"
      " leases.node_id, i.item),"
      "@FINISH@"
      " n AS (SELECT l.item, nodes.id, nodes.state, nodes.accelerator_kind,"
      " nodes.accelerator_count, nodes.accelerator_memory_bytes,"
      " nodes.fingerprint, nodes.calibration_noise FROM l JOIN nodes"
      " ON nodes.id = l.node_id),"
      " ready AS (SELECT * FROM n WHERE state = 2"
      " AND (SELECT count(*) FROM j) = (SELECT count(*) FROM l)"
      " AND (SELECT count(*) FROM e) = (SELECT count(*) FROM l)),"
      " batched AS (SELECT count(DISTINCT (accelerator_kind,"
      " accelerator_count, accelerator_memory_bytes, fingerprint,"
      " calibration_noise)) <= 1"
      " AND NOT EXISTS (SELECT 1 FROM jobs WHERE state = 1"
      " AND req_node_id <> '' AND req_node_id IN (SELECT id FROM ready))"
      " AS yes FROM ready),"
      " d AS (SELECT * FROM ready LIMIT 1),"
      " picked AS (SELECT id, priority_class, priority FROM jobs"
      " WHERE state = 1 AND (SELECT yes FROM batched)"
      " AND (req_accelerator_kind = ''"
      " OR req_accelerator_kind = (SELECT accelerator_kind FROM d))"
      " AND req_min_accelerator_count <= (SELECT accelerator_count FROM d)"
      " AND req_min_accelerator_memory <="
      " (SELECT accelerator_memory_bytes FROM d)"
      " AND (req_fingerprint = '' OR req_fingerprint = (SELECT fingerprint"
      " FROM d))"
      " AND req_node_id = ''"
      " AND (req_max_node_noise = 0"
      " OR req_max_node_noise >= (SELECT calibration_noise FROM d))"
      " ORDER BY priority_class, priority DESC, id LIMIT @LIMIT@"
      " FOR UPDATE SKIP LOCKED),"
      " ranked AS (SELECT id, row_number() OVER (ORDER BY priority_class,"
      " priority DESC, id) AS rank FROM picked),"
      " takers AS (SELECT item, id AS node_id, row_number() OVER"
      " (ORDER BY item) AS rank FROM ready),"
      " claimed AS ("
      " UPDATE jobs SET state = 2, attempts = jobs.attempts + 1,"
      " current_lease_id = 'lease-' || jobs.id || '-' || (jobs.attempts + 1),"
      " updated_at_us = $1 FROM ranked JOIN takers USING (rank)"
      " WHERE jobs.id = ranked.id"
      " RETURNING jobs.id, jobs.kind, jobs.evaluation_id, jobs.attempts,"
      " jobs.current_lease_id, jobs.priority_class, jobs.priority,"
      " takers.node_id, takers.item),"
      " leased AS ("
      " INSERT INTO leases (id, job_id, job_kind, evaluation_id, node_id,"
      " attempt, state, granted_at_us, expires_at_us)"
      " SELECT cl.current_lease_id, cl.id, cl.kind, cl.evaluation_id,"
      " cl.node_id, cl.attempts, 1, CAST($1 AS BIGINT), i.expires_at_us"
      " FROM claimed cl JOIN i ON i.item = cl.item),"
      " running AS ("
      " UPDATE evaluations SET state = 2, node_id = claimed.node_id,"
      " attempt = claimed.attempts, updated_at_us = $1"
      " FROM claimed WHERE evaluations.id = claimed.evaluation_id)"
      " SELECT i.item, CAST(l.id IS NOT NULL AS INTEGER), n.state,"
      " CAST((SELECT yes FROM batched) AS INTEGER),"
      " cl.id, cl.kind, cl.evaluation_id, cl.attempts,"
      " cl.current_lease_id, cl.priority_class, cl.priority, ev.created_at_us,"
      " c.proto FROM i LEFT JOIN l ON l.item = i.item"
      " LEFT JOIN n ON n.item = i.item LEFT JOIN claimed cl ON cl.item = i.item"
      " LEFT JOIN evaluations ev ON ev.id = cl.evaluation_id"
      " LEFT JOIN candidates c ON c.id = ev.candidate_id ORDER BY i.item";
  static_assert(v1::ACTIVE == 2, "kPgFinishAndClaimBatch names ACTIVE as 2");
  // kPgFinishAndClaimBatch's text for a batch of `n` (2 to kMaxFinishBatch),
  // made once per size rather than on every statement.
  static const std::string& PgFinishAndClaimBatch(size_t n) {
    static const std::vector<std::string>* texts = [] {
      const std::string finish = absl::StrCat(
          EndJobAndEvaluation("$1"), " v AS (", kVerdictInsert,
          " SELECT e.id, e.candidate_id, l.id, i.decision, i.policy,"
          " i.manifest_hash, i.provenance_node_id, i.node_fingerprint,"
          " i.software_version, i.statistics_seed, i.decided_at_us, i.proto"
          " FROM l JOIN e ON e.id = l.evaluation_id JOIN i ON i.item = l.item),"
          " vs AS (INSERT INTO verdict_samples (evaluation_id, sample_id)"
          " SELECT l.evaluation_id, s.id FROM l JOIN s ON s.item = l.item),"
          " mc AS (",
          kComparisonInsert,
          ", i.decided_at_us, m.proto FROM l JOIN i ON i.item = l.item JOIN"
          " unnest(CAST($18 AS INTEGER[]), ",
          PgComparisonArrays::Casts(19), ") AS m(item, ",
          PgComparisonArrays::kNames, ") ON m.item = l.item),");
      auto* v = new std::vector<std::string>;
      for (int i = 0; i <= kMaxFinishBatch; ++i) {
        v->push_back(absl::StrReplaceAll(
            kPgFinishAndClaimBatch,
            {{"@LIMIT@", absl::StrCat(i)}, {"@FINISH@", finish}}));
      }
      return v;
    }();
    return texts->at(n);
  }

  // PostgreSQL array literals, passed as one text parameter.
  static SqlValue PgArray(const std::vector<int64_t>& v) {
    return SqlValue(absl::StrCat("{", absl::StrJoin(v, ","), "}"));
  }
  static SqlValue PgArray(const std::vector<double>& v) {
    std::vector<std::string> parts;
    for (double d : v) parts.push_back(DoubleToSqlText(d));
    return SqlValue(absl::StrCat("{", absl::StrJoin(parts, ","), "}"));
  }
  static SqlValue PgArray(const std::vector<std::string>& v) {
    std::string out = "{";
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out.push_back(',');
      out.push_back('"');
      for (char c : v[i]) {
        if (c == '"' || c == '\\') out.push_back('\\');
        out.push_back(c);
      }
      out.push_back('"');
    }
    out.push_back('}');
    return SqlValue(std::move(out));
  }

  int64_t NowUs() const { return absl::ToUnixMicros(clock_->Now()); }

  absl::Status Run(absl::string_view op, TxMode mode,
                   absl::FunctionRef<absl::Status(SqlTx&)> fn) {
    return driver_->Transact(op, mode, fn);
  }

  // Row lock for rows the transaction will update (none on SQLite, whose
  // write transactions are exclusive). NO KEY UPDATE: does not block
  // foreign-key checks of inserts that reference the row.
  const char* ForUpdate() const { return pg_ ? " FOR NO KEY UPDATE" : ""; }

  // A list of ids as one parameter, and the subquery that expands it.
  SqlValue IdList(const std::vector<int64_t>& ids) const {
    return SqlValue(pg_ ? absl::StrCat("{", absl::StrJoin(ids, ","), "}")
                        : absl::StrCat("[", absl::StrJoin(ids, ","), "]"));
  }
  std::string IdListSelect(int param) const {
    return pg_ ? absl::StrCat("SELECT unnest(CAST($", param, " AS BIGINT[]))")
               : absl::StrCat("SELECT value FROM json_each($", param, ")");
  }

  static absl::Status ValidateRequirements(const JobRequirements& r) {
    if (r.min_accelerator_count < 0 || r.min_accelerator_memory_bytes < 0) {
      return Invalid("requirements have a negative minimum");
    }
    if (!(r.max_node_noise >= 0) || !std::isfinite(r.max_node_noise)) {
      return Invalid("requirements have a noise limit that is not a non-negative number");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<int64_t> UpsertRepo(SqlTx& tx, absl::string_view url,
                                     int64_t now) {
    DG_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO repos (url, created_at_us) VALUES ($1, $2) ON "
                "CONFLICT (url) DO NOTHING",
                {url, now})
            .status());
    DG_ASSIGN_OR_RETURN(SqlResult r,
                        tx.Exec("SELECT id FROM repos WHERE url = $1", {url}));
    if (r.rows.empty()) return absl::InternalError("repository row vanished");
    return r.rows[0].Int(0);
  }

  absl::Status AuditTx(SqlTx& tx, int64_t now, absl::string_view actor,
                       absl::string_view action, absl::string_view subject,
                       absl::string_view detail) {
    return tx
        .Exec(
            "INSERT INTO audit_log (at_us, actor, action, subject, detail) "
            "VALUES ($1, $2, $3, $4, $5)",
            {now, actor, action, subject, detail})
        .status();
  }

  absl::Status RequireEvaluation(SqlTx& tx, absl::string_view id) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r, tx.Exec("SELECT id FROM evaluations WHERE id = $1", {id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(absl::StrCat("evaluation ", id, " not found"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<v1::Evaluation> EvaluationFromRow(const SqlRow& row) {
    v1::Evaluation e;
    e.set_id(row.Text(0));
    e.set_state(static_cast<v1::EvaluationState>(row.Int(1)));
    e.set_node_id(row.Text(2));
    e.set_attempt(static_cast<int32_t>(row.Int(3)));
    *e.mutable_created_at() = ToProto(row.Int(4));
    *e.mutable_updated_at() = ToProto(row.Int(5));
    DG_ASSIGN_OR_RETURN(*e.mutable_candidate(),
                        Parse<v1::Candidate>(row.Bytes(6), "candidate"));
    if (!row.IsNull(7)) {
      DG_ASSIGN_OR_RETURN(*e.mutable_verdict(),
                          Parse<v1::Verdict>(row.Bytes(7), "verdict"));
      e.mutable_verdict()->set_evaluation_id(e.id());
      e.mutable_verdict()->set_candidate_id(e.candidate().id());
    }
    v1::MergeStatus* m = e.mutable_merge();
    if (row.IsNull(8)) {
      m->set_state(v1::NOT_MERGING);
    } else {
      m->set_state(static_cast<v1::MergeState>(row.Int(8)));
      m->set_merged_sha(row.Text(9));
      m->set_remeasure_evaluation_id(row.Text(10));
      m->set_message(row.Text(11));
    }
    return e;
  }

  absl::StatusOr<v1::Evaluation> LoadEvaluation(SqlTx& tx, absl::string_view id,
                                                bool with_stages) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat(kEvaluationSelect, "WHERE e.id = $1"), {id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(absl::StrCat("evaluation ", id, " not found"));
    }
    DG_ASSIGN_OR_RETURN(v1::Evaluation e, EvaluationFromRow(r.rows[0]));
    if (with_stages) {
      DG_ASSIGN_OR_RETURN(SqlResult s,
                          tx.Exec("SELECT kind, proto FROM stages WHERE "
                                  "evaluation_id = $1 ORDER BY id",
                                  {id}));
      std::map<int64_t, std::string> latest;  // kind -> proto; later wins
      for (const SqlRow& row : s.rows) latest[row.Int(0)] = row.Bytes(1);
      for (const auto& [kind, bytes] : latest) {
        DG_ASSIGN_OR_RETURN(*e.add_stages(), Parse<v1::Stage>(bytes, "stage"));
      }
    }
    return e;
  }

  absl::StatusOr<v1::Node> NodeFromRow(const SqlRow& row) {
    v1::Node n;
    n.set_id(row.Text(0));
    n.set_name(row.Text(1));
    DG_ASSIGN_OR_RETURN(
        *n.mutable_dimensions(),
        Parse<v1::NodeDimensions>(row.Bytes(2), "node dimensions"));
    n.set_state(static_cast<v1::NodeState>(row.Int(3)));
    n.set_calibration_noise(row.Double(4));
    if (row.Int(5) != 0) *n.mutable_last_heartbeat() = ToProto(row.Int(5));
    n.set_current_lease_id(row.Text(6));
    return n;
  }

  absl::StatusOr<v1::Node> LoadNode(SqlTx& tx, absl::string_view id) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat(kNodeSelect, " WHERE n.id = $1"), {id}));
    if (r.rows.empty())
      return absl::NotFoundError(absl::StrCat("node ", id, " not found"));
    return NodeFromRow(r.rows[0]);
  }

  static MergeEntry MergeFromRow(const SqlRow& row) {
    MergeEntry m;
    m.position = row.Int(0);
    m.evaluation_id = row.Text(1);
    m.repo = row.Text(2);
    m.target_branch = row.Text(3);
    m.status.set_state(static_cast<v1::MergeState>(row.Int(4)));
    m.status.set_merged_sha(row.Text(5));
    m.status.set_remeasure_evaluation_id(row.Text(6));
    m.status.set_message(row.Text(7));
    m.created_at = FromUs(row.Int(8));
    m.updated_at = FromUs(row.Int(9));
    return m;
  }

  absl::StatusOr<MergeEntry> LoadMerge(SqlTx& tx,
                                       absl::string_view evaluation_id) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat(kMergeSelect, " WHERE m.evaluation_id = $1"),
                {evaluation_id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(absl::StrCat("evaluation ", evaluation_id,
                                              " is not in the merge queue"));
    }
    return MergeFromRow(r.rows[0]);
  }

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

  // kPgClaim for at most `limit` jobs. The limit is part of the text, not a
  // parameter: PostgreSQL then knows the claim touches few rows and plans
  // index lookups for the joins (its generic plan for LIMIT $n assumed many
  // rows).
  static std::string PgClaim(int limit) {
    return absl::StrReplaceAll(kPgClaim, {{"@LIMIT@", absl::StrCat(limit)}});
  }
  static std::vector<SqlValue> PgClaimArgs(const std::string& node_id,
                                           const v1::NodeDimensions& d,
                                           int64_t now, int64_t expires) {
    return {d.accelerator_kind(),
            d.accelerator_count(),
            d.accelerator_memory_bytes(),
            d.fingerprint(),
            node_id,
            now,
            expires};
  }

  // Leases up to `limit` queued jobs matching `d` to `node_id` within `tx`.
  absl::StatusOr<std::vector<Claimed>> ClaimInTx(SqlTx& tx,
                                                 const std::string& node_id,
                                                 const v1::NodeDimensions& d,
                                                 int limit, int64_t now,
                                                 int64_t expires) {
    std::vector<Claimed> claimed;
    if (pg_) {
      DG_ASSIGN_OR_RETURN(
          SqlResult r,
          tx.Exec(PgClaim(limit), PgClaimArgs(node_id, d, now, expires)));
      for (const SqlRow& row : r.rows)
        claimed.push_back(ClaimedFromRow(row, 0));
      return claimed;
    }
    // SQLite: the write transaction is exclusive, so select then update.
    // (UPDATE ... WHERE id IN (SELECT ... LIMIT) RETURNING would build
    // three temporary tables per claim.)
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(kSqliteClaim, {d.accelerator_kind(), d.accelerator_count(),
                               d.accelerator_memory_bytes(), d.fingerprint(),
                               node_id, limit}));
    for (const SqlRow& row : r.rows) {
      const int64_t job = row.Int(0);
      const int attempts = static_cast<int>(row.Int(3)) + 1;
      claimed.push_back({job, static_cast<int>(row.Int(1)), row.Text(2),
                         attempts, absl::StrCat("lease-", job, "-", attempts),
                         static_cast<int>(row.Int(4)),
                         static_cast<int>(row.Int(5)), 0, ""});
    }
    for (Claimed& c : claimed) {
      DG_RETURN_IF_ERROR(
          tx.Exec("UPDATE jobs SET state = $2, attempts = $3, "
                  "current_lease_id = $4, updated_at_us = $5 WHERE id = $1",
                  {c.job_id, kJobLeased, c.attempts, c.lease_id, now})
              .status());
      DG_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO leases (id, job_id, job_kind, evaluation_id, "
                  "node_id, attempt, state, granted_at_us, expires_at_us) "
                  "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                  {c.lease_id, c.job_id, c.kind,
                   c.evaluation_id.empty() ? SqlValue()
                                           : SqlValue(c.evaluation_id),
                   node_id, c.attempts, kLeaseActive, now, expires})
              .status());
      if (c.evaluation_id.empty()) continue;
      DG_RETURN_IF_ERROR(
          tx.Exec("UPDATE evaluations SET state = $2, node_id = $3, attempt "
                  "= $4, updated_at_us = $5 WHERE id = $1",
                  {c.evaluation_id, static_cast<int>(v1::RUNNING), node_id,
                   c.attempts, now})
              .status());
      DG_ASSIGN_OR_RETURN(
          SqlResult e,
          tx.Exec("SELECT e.created_at_us, c.proto FROM evaluations e JOIN "
                  "candidates c ON c.id = e.candidate_id WHERE e.id = $1",
                  {c.evaluation_id}));
      if (e.rows.empty()) {
        return absl::InternalError(absl::StrCat(
            "job ", c.job_id, " names missing evaluation ", c.evaluation_id));
      }
      c.created_at_us = e.rows[0].Int(0);
      c.candidate = e.rows[0].Bytes(1);
    }
    return claimed;
  }

  // A row of kPgClaim's result (or of kPgFinishAndClaim's, from `first`).
  static Claimed ClaimedFromRow(const SqlRow& row, int first) {
    return {row.Int(first),
            static_cast<int>(row.Int(first + 1)),
            row.Text(first + 2),
            static_cast<int>(row.Int(first + 3)),
            row.Text(first + 4),
            static_cast<int>(row.Int(first + 5)),
            static_cast<int>(row.Int(first + 6)),
            row.Int(first + 7),
            row.Bytes(first + 8)};
  }

  // The leases of `claimed`, in claim order (calibration, class, priority,
  // submission).
  absl::StatusOr<std::vector<v1::Lease>> LeasesFrom(
      std::vector<Claimed> claimed, const std::string& node_id, int64_t now,
      int64_t expires) {
    std::sort(
        claimed.begin(), claimed.end(), [](const Claimed& a, const Claimed& b) {
          return std::make_tuple(a.priority_class, -a.priority, a.job_id) <
                 std::make_tuple(b.priority_class, -b.priority, b.job_id);
        });
    std::vector<v1::Lease> leases;
    leases.reserve(claimed.size());
    for (const Claimed& c : claimed) {
      v1::Lease lease;
      lease.set_id(c.lease_id);
      lease.set_job_kind(static_cast<v1::JobKind>(c.kind));
      *lease.mutable_expires_at() = ToProto(expires);
      if (!c.evaluation_id.empty()) {
        v1::Evaluation* e = lease.mutable_evaluation();
        e->set_id(c.evaluation_id);
        DG_ASSIGN_OR_RETURN(*e->mutable_candidate(),
                            Parse<v1::Candidate>(c.candidate, "candidate"));
        e->set_state(v1::RUNNING);
        e->set_node_id(node_id);
        e->set_attempt(c.attempts);
        *e->mutable_created_at() = ToProto(c.created_at_us);
        *e->mutable_updated_at() = ToProto(now);
      }
      leases.push_back(std::move(lease));
    }
    return leases;
  }

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
      const LeaseRef& ref, const v1::Verdict& verdict, int64_t now) {
    DG_RETURN_IF_ERROR(ValidateRef(ref));
    if (verdict.decision() != v1::ACCEPT && verdict.decision() != v1::REJECT &&
        verdict.decision() != v1::INCONCLUSIVE) {
      return Invalid(absl::StrCat(
          "verdict.decision must be ACCEPT, REJECT or INCONCLUSIVE, got ",
          v1::Decision_Name(verdict.decision())));
    }
    absl::flat_hash_set<std::string> metrics;
    for (const v1::MetricComparison& m : verdict.metrics()) {
      if (m.metric().empty())
        return Invalid("verdict.metrics has an empty metric name");
      if (!metrics.insert(m.metric()).second) {
        return Invalid(
            absl::StrCat("verdict.metrics names '", m.metric(), "' twice"));
      }
    }
    StoredVerdict out{verdict,
                      {verdict.provenance().sample_ids().begin(),
                       verdict.provenance().sample_ids().end()}};
    v1::Verdict& v = out.verdict;
    if (!v.has_decided_at()) *v.mutable_decided_at() = ToProto(now);
    if (v.provenance().node_id().empty()) {
      v.mutable_provenance()->set_node_id(ref.node_id);
    }
    return out;
  }

  // FinishLease step by step in a write transaction: says precisely what is
  // wrong when the lease or the verdict does not fit.
  absl::Status FinishInTx(SqlTx& tx, const LeaseRef& ref,
                          const StoredVerdict& stored, int64_t now) {
    const v1::Verdict& v = stored.verdict;
    const std::set<int64_t>& sample_ids = stored.sample_ids;
    DG_ASSIGN_OR_RETURN(LeaseRow lease, LockLiveLease(tx, ref, now));
    if (lease.job_kind != v1::EVALUATION) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lease ", lease.id,
          " is a calibration lease: end it with FinishCalibration"));
    }
    DG_ASSIGN_OR_RETURN(
        SqlResult e,
        tx.Exec("SELECT candidate_id FROM evaluations WHERE id = $1",
                {lease.evaluation_id}));
    if (e.rows.empty()) {
      return absl::InternalError(
          absl::StrCat("lease ", lease.id, " names a missing evaluation"));
    }
    const std::string candidate_id = e.rows[0].Text(0);
    if (!v.evaluation_id().empty() &&
        v.evaluation_id() != lease.evaluation_id) {
      return Invalid(absl::StrCat("verdict.evaluation_id ", v.evaluation_id(),
                                  " does not match lease ", lease.id,
                                  " (evaluation ", lease.evaluation_id, ")"));
    }
    if (!v.candidate_id().empty() && v.candidate_id() != candidate_id) {
      return Invalid(absl::StrCat("verdict.candidate_id ", v.candidate_id(),
                                  " does not match the evaluation's candidate ",
                                  candidate_id));
    }
    if (!sample_ids.empty()) {
      std::vector<int64_t> ids(sample_ids.begin(), sample_ids.end());
      DG_ASSIGN_OR_RETURN(
          SqlResult found,
          tx.Exec(absl::StrCat("SELECT id FROM samples WHERE evaluation_id = "
                               "$1 AND id IN (",
                               IdListSelect(2), ")"),
                  {lease.evaluation_id, IdList(ids)}));
      if (found.rows.size() != ids.size()) {
        std::set<int64_t> have;
        for (const SqlRow& row : found.rows) have.insert(row.Int(0));
        std::vector<int64_t> missing;
        for (int64_t id : ids) {
          if (!have.count(id)) missing.push_back(id);
        }
        return Invalid(absl::StrCat(
            "verdict.provenance.sample_ids: ", missing.size(), " of ",
            ids.size(), " ids are not samples of evaluation ",
            lease.evaluation_id, " (first: ", missing.at(0),
            "); a verdict must name the samples it was computed from"));
      }
    }
    const int64_t decided = FromProto(v.decided_at());
    const v1::Provenance& p = v.provenance();
    int64_t seed = 0;
    uint64_t useed = p.statistics_seed();
    std::memcpy(&seed, &useed, sizeof(seed));
    DG_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO verdicts (evaluation_id, candidate_id, lease_id, "
                "decision, policy, manifest_hash, node_id, node_fingerprint, "
                "software_version, statistics_seed, decided_at_us, proto) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
                {lease.evaluation_id, candidate_id, lease.id,
                 static_cast<int>(v.decision()), static_cast<int>(v.policy()),
                 p.manifest_hash(), p.node_id(), p.node_fingerprint(),
                 p.software_version(), seed, decided,
                 Bytes{v.SerializeAsString()}})
            .status());
    if (!sample_ids.empty()) {
      std::vector<int64_t> ids(sample_ids.begin(), sample_ids.end());
      DG_RETURN_IF_ERROR(
          tx.Exec(pg_ ? "INSERT INTO verdict_samples (evaluation_id, "
                        "sample_id) "
                        "SELECT CAST($1 AS TEXT), unnest(CAST($2 AS BIGINT[]))"
                      : "INSERT INTO verdict_samples (evaluation_id, "
                        "sample_id) "
                        "SELECT $1, value FROM json_each($2)",
                  {lease.evaluation_id, IdList(ids)})
              .status());
    }
    for (const v1::MetricComparison& m : v.metrics()) {
      DG_RETURN_IF_ERROR(
          tx.Exec("INSERT INTO metric_comparisons (evaluation_id, metric, "
                  "unit, direction, is_primary, baseline, candidate, speedup, "
                  "ci_low, ci_high, n_pairs, p_value, significant, "
                  "flagged_for_review, decided_at_us, proto) VALUES ($1, $2, "
                  "$3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, "
                  "$16)",
                  {lease.evaluation_id, m.metric(), m.unit(),
                   static_cast<int>(m.direction()), m.primary() ? 1 : 0,
                   m.baseline(), m.candidate(), m.speedup(), m.ci_low(),
                   m.ci_high(), m.n_pairs(), m.p_value(),
                   m.significant() ? 1 : 0, m.flagged_for_review() ? 1 : 0,
                   decided, Bytes{m.SerializeAsString()}})
              .status());
    }
    return EndLease(tx, lease, now, v1::FINISHED, "finished");
  }

  // Verdicts' metric comparisons as the 14 parallel arrays PgFinish() and
  // kPgFinishAndClaimBatch unnest, plus (for the batch) each comparison's
  // lease position.
  struct PgComparisonArrays {
    // The arrays AppendTo adds, in order: their names in the statements'
    // unnest and their element types.
    static constexpr char kNames[] =
        "metric, unit, direction, is_primary, baseline, candidate, speedup,"
        " ci_low, ci_high, n_pairs, p_value, significant, flagged, proto";
    static constexpr const char* kTypes[] = {"TEXT",
                                             "TEXT",
                                             "INTEGER",
                                             "INTEGER",
                                             "DOUBLE PRECISION",
                                             "DOUBLE PRECISION",
                                             "DOUBLE PRECISION",
                                             "DOUBLE PRECISION",
                                             "DOUBLE PRECISION",
                                             "INTEGER",
                                             "DOUBLE PRECISION",
                                             "INTEGER",
                                             "INTEGER",
                                             "BYTEA"};
    // "CAST($first AS TEXT[]), ..." for the 14 arrays.
    static std::string Casts(int first) {
      std::vector<std::string> casts;
      for (const char* type : kTypes) {
        casts.push_back(absl::StrCat("CAST($", first++, " AS ", type, "[])"));
      }
      return absl::StrJoin(casts, ", ");
    }

    std::vector<int64_t> item;
    std::vector<std::string> metric, unit, proto;
    std::vector<int64_t> direction, primary, n_pairs, significant, flagged;
    std::vector<double> baseline, candidate, speedup, ci_low, ci_high, p_value;

    void Add(const v1::Verdict& v, int64_t position) {
      for (const v1::MetricComparison& m : v.metrics()) {
        item.push_back(position);
        metric.push_back(m.metric());
        unit.push_back(m.unit());
        direction.push_back(m.direction());
        primary.push_back(m.primary() ? 1 : 0);
        baseline.push_back(m.baseline());
        candidate.push_back(m.candidate());
        speedup.push_back(m.speedup());
        ci_low.push_back(m.ci_low());
        ci_high.push_back(m.ci_high());
        n_pairs.push_back(m.n_pairs());
        p_value.push_back(m.p_value());
        significant.push_back(m.significant() ? 1 : 0);
        flagged.push_back(m.flagged_for_review() ? 1 : 0);
        // bytea in hex input form; PgArray escapes the backslash.
        proto.push_back(absl::StrCat("\\x", HexEncode(m.SerializeAsString())));
      }
    }
    void AppendTo(std::vector<SqlValue>& args) const {
      for (SqlValue a :
           {PgArray(metric), PgArray(unit), PgArray(direction),
            PgArray(primary), PgArray(baseline), PgArray(candidate),
            PgArray(speedup), PgArray(ci_low), PgArray(ci_high),
            PgArray(n_pairs), PgArray(p_value), PgArray(significant),
            PgArray(flagged), PgArray(proto)}) {
        args.push_back(std::move(a));
      }
    }
  };

  static int64_t SeedColumn(const v1::Verdict& v) {
    int64_t seed = 0;
    const uint64_t useed = v.provenance().statistics_seed();
    std::memcpy(&seed, &useed, sizeof(seed));
    return seed;
  }

  // The parameters of PgFinish() ($1-$29; PgFinishAndClaim() adds $30).
  static std::vector<SqlValue> PgFinishArgs(const LeaseRef& ref,
                                            const StoredVerdict& stored,
                                            int64_t now) {
    const v1::Verdict& v = stored.verdict;
    const std::set<int64_t>& sample_ids = stored.sample_ids;
    const v1::Provenance& p = v.provenance();
    std::vector<SqlValue> args = {
        ref.lease_id,
        ref.node_id,
        now,
        v.evaluation_id(),
        v.candidate_id(),
        PgArray(std::vector<int64_t>(sample_ids.begin(), sample_ids.end())),
        static_cast<int>(v.decision()),
        static_cast<int>(v.policy()),
        p.manifest_hash(),
        p.node_id(),
        p.node_fingerprint(),
        p.software_version(),
        SeedColumn(v),
        FromProto(v.decided_at()),
        Bytes{v.SerializeAsString()}};
    PgComparisonArrays comparisons;
    comparisons.Add(v, 1);
    comparisons.AppendTo(args);
    return args;
  }

  // The parameters of kPgFinishAndClaimBatch ($1-$32).
  static std::vector<SqlValue> PgFinishBatchArgs(
      absl::Span<FinishBatchItem* const> batch, int64_t now) {
    std::vector<std::string> lease, node, evaluation, candidate, manifest,
        provenance_node, fingerprint, software, proto;
    std::vector<int64_t> decision, policy, seed, decided, expires, sample_item,
        sample_id;
    PgComparisonArrays comparisons;
    for (size_t i = 0; i < batch.size(); ++i) {
      const FinishBatchItem& item = *batch[i];
      const v1::Verdict& v = item.verdict->verdict;
      const v1::Provenance& p = v.provenance();
      lease.push_back(item.ref->lease_id);
      node.push_back(item.ref->node_id);
      evaluation.push_back(v.evaluation_id());
      candidate.push_back(v.candidate_id());
      decision.push_back(static_cast<int>(v.decision()));
      policy.push_back(static_cast<int>(v.policy()));
      manifest.push_back(p.manifest_hash());
      provenance_node.push_back(p.node_id());
      fingerprint.push_back(p.node_fingerprint());
      software.push_back(p.software_version());
      seed.push_back(SeedColumn(v));
      decided.push_back(FromProto(v.decided_at()));
      proto.push_back(absl::StrCat("\\x", HexEncode(v.SerializeAsString())));
      expires.push_back(item.expires_at_us);
      for (int64_t id : item.verdict->sample_ids) {
        sample_item.push_back(static_cast<int64_t>(i) + 1);
        sample_id.push_back(id);
      }
      comparisons.Add(v, static_cast<int64_t>(i) + 1);
    }
    std::vector<SqlValue> args = {now,
                                  PgArray(lease),
                                  PgArray(node),
                                  PgArray(evaluation),
                                  PgArray(candidate),
                                  PgArray(decision),
                                  PgArray(policy),
                                  PgArray(manifest),
                                  PgArray(provenance_node),
                                  PgArray(fingerprint),
                                  PgArray(software),
                                  PgArray(seed),
                                  PgArray(decided),
                                  PgArray(proto),
                                  PgArray(expires),
                                  PgArray(sample_item),
                                  PgArray(sample_id),
                                  PgArray(comparisons.item)};
    comparisons.AppendTo(args);
    return args;
  }

  // Runs kPgFinishAndClaimBatch for `batch` in a claim turn and sets each
  // item's results. If the statement fails for another reason than a lost
  // connection (whose outcome is unknown for all), each lease is tried
  // alone, so that one lease's error is only its own.
  void RunFinishBatch(absl::Span<FinishBatchItem* const> batch) {
    ConcurrencyLimit::Turn turn(claims_);
    const absl::Status status = ExecFinishBatch(batch);
    if (status.ok() || batch.size() == 1 || absl::IsUnavailable(status)) {
      for (FinishBatchItem* item : batch) item->status = status;
      return;
    }
    for (FinishBatchItem* item : batch) item->status = ExecFinishBatch({item});
  }

  absl::Status ExecFinishBatch(absl::Span<FinishBatchItem* const> batch) {
    finish_statements_.fetch_add(1, std::memory_order_relaxed);
    finish_statement_leases_.fetch_add(static_cast<int64_t>(batch.size()),
                                       std::memory_order_relaxed);
    const int64_t now = NowUs();
    for (FinishBatchItem* item : batch) {
      item->now_us = now;
      item->expires_at_us =
          now + absl::ToInt64Microseconds(item->lease_duration);
    }
    if (batch.size() == 1) return ExecFinishOne(*batch.front());
    DG_ASSIGN_OR_RETURN(
        SqlResult r, driver_->ExecPipelined("FinishLeaseAndClaimNext",
                                            PgFinishAndClaimBatch(batch.size()),
                                            PgFinishBatchArgs(batch, now)));
    if (r.rows.size() != batch.size()) {
      return absl::InternalError(absl::StrCat("a batch of ", batch.size(),
                                              " finishes returned ",
                                              r.rows.size(), " rows"));
    }
    for (size_t i = 0; i < batch.size(); ++i) {
      const SqlRow& row = r.rows[i];
      FinishBatchItem& item = *batch[i];
      item.ended = row.Int(1) == 1;
      item.node_state.reset();
      if (!row.IsNull(2)) {
        item.node_state = static_cast<v1::NodeState>(row.Int(2));
      }
      item.batched = row.Int(3) == 1;
      item.claimed.clear();
      if (!row.IsNull(4)) item.claimed.push_back(ClaimedFromRow(row, 4));
    }
    return absl::OkStatus();
  }

  // A batch of one: PgFinish() and kPgClaimAfterFinish, which cost
  // PostgreSQL about 200 us less than kPgFinishAndClaimBatch for one lease
  // (docs/measurements/dispatch.md, "Finishes and claims in batches").
  absl::Status ExecFinishOne(FinishBatchItem& item) {
    std::vector<SqlValue> args =
        PgFinishArgs(*item.ref, *item.verdict, item.now_us);
    args.push_back(item.expires_at_us);
    DG_ASSIGN_OR_RETURN(SqlResult r,
                        driver_->ExecPipelined("FinishLeaseAndClaimNext",
                                               PgFinishAndClaim(), args));
    // One row per claimed job, or one without: whether the lease was
    // finished, the node's state, then kPgClaim's columns.
    const SqlRow& first = r.rows.at(0);
    item.ended = first.Int(0) == 1;
    item.node_state.reset();
    if (!first.IsNull(1)) {
      item.node_state = static_cast<v1::NodeState>(first.Int(1));
    }
    item.batched = true;
    item.claimed.clear();
    for (const SqlRow& row : r.rows) {
      if (!row.IsNull(2)) item.claimed.push_back(ClaimedFromRow(row, 2));
    }
    return absl::OkStatus();
  }

  // Locks the lease, then its job (the global lock order: leases, jobs,
  // evaluations), and checks that `ref` may use the lease.
  absl::StatusOr<LeaseRow> LockLiveLease(SqlTx& tx, const LeaseRef& ref,
                                         int64_t now) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat(kLeaseColumns, ForUpdate()), {ref.lease_id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(
          absl::StrCat("lease ", ref.lease_id, " not found"));
    }
    LeaseRow lease = LeaseFromRow(r.rows[0]);
    DG_RETURN_IF_ERROR(CheckLive(lease, ref, now));
    if (pg_) {
      DG_RETURN_IF_ERROR(
          tx.Exec("SELECT id FROM jobs WHERE id = $1 FOR NO KEY UPDATE",
                  {lease.job_id})
              .status());
    }
    return lease;
  }

  // For writes that only add rows under a live evaluation lease (stages,
  // samples): a shared lock keeps the lease live until commit.
  absl::StatusOr<LeaseRow> SharedLiveLease(SqlTx& tx, const LeaseRef& ref,
                                           int64_t now) {
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat(kLeaseColumns, pg_ ? " FOR SHARE" : ""),
                {ref.lease_id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(
          absl::StrCat("lease ", ref.lease_id, " not found"));
    }
    LeaseRow lease = LeaseFromRow(r.rows[0]);
    DG_RETURN_IF_ERROR(CheckLive(lease, ref, now));
    if (lease.job_kind != v1::EVALUATION) {
      return absl::FailedPreconditionError(absl::StrCat(
          "lease ", lease.id,
          " is a calibration lease; it records no stages or samples"));
    }
    return lease;
  }

  // Lease ended with an outcome: lease finished, job done, evaluation in
  // `state`.
  absl::Status EndLease(SqlTx& tx, const LeaseRow& lease, int64_t now,
                        v1::EvaluationState state, absl::string_view reason) {
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE leases SET state = $2, ended_at_us = $3, end_reason = "
                "$4 WHERE id = $1",
                {lease.id, kLeaseFinished, now, reason})
            .status());
    DG_RETURN_IF_ERROR(tx.Exec("UPDATE jobs SET state = $2, updated_at_us = $3 "
                               "WHERE id = $1",
                               {lease.job_id, kJobDone, now})
                           .status());
    if (lease.evaluation_id.empty()) return absl::OkStatus();
    return tx
        .Exec(
            "UPDATE evaluations SET state = $2, updated_at_us = $3 WHERE id = "
            "$1",
            {lease.evaluation_id, static_cast<int>(state), now})
        .status();
  }

  // Lease ended without an outcome (infrastructure failure or expiry): the
  // job is queued again, or DEAD once its attempts are used up.
  absl::StatusOr<v1::EvaluationState> ReleaseJob(SqlTx& tx,
                                                 const LeaseRow& lease,
                                                 int lease_state,
                                                 absl::string_view reason,
                                                 int64_t now) {
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE leases SET state = $2, ended_at_us = $3, end_reason = "
                "$4 WHERE id = $1",
                {lease.id, lease_state, now, reason})
            .status());
    DG_ASSIGN_OR_RETURN(
        SqlResult j,
        tx.Exec("SELECT attempts, max_attempts, state FROM jobs WHERE id = $1",
                {lease.job_id}));
    if (j.rows.empty()) return absl::InternalError("leased job vanished");
    if (j.rows[0].Int(2) != kJobLeased) {
      return absl::InternalError(absl::StrCat(
          "job ", lease.job_id, " of live lease ", lease.id, " is ",
          JobStateName(static_cast<int>(j.rows[0].Int(2)))));
    }
    const bool dead = j.rows[0].Int(0) >= j.rows[0].Int(1);
    DG_RETURN_IF_ERROR(
        tx.Exec("UPDATE jobs SET state = $2, current_lease_id = '', last_error "
                "= $3, updated_at_us = $4 WHERE id = $1",
                {lease.job_id, dead ? kJobDead : kJobQueued, reason, now})
            .status());
    const v1::EvaluationState state = dead ? v1::DEAD : v1::QUEUED;
    if (!lease.evaluation_id.empty()) {
      DG_RETURN_IF_ERROR(
          tx.Exec("UPDATE evaluations SET state = $2, updated_at_us = $3 WHERE "
                  "id = $1",
                  {lease.evaluation_id, static_cast<int>(state), now})
              .status());
    }
    return state;
  }

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
  const bool pg_;
  // Claims in flight from this store (StoreOptions::max_concurrent_claims).
  ConcurrencyLimit claims_;
  // PostgreSQL's FinishLeaseAndClaimNext callers, in batches of up to
  // kMaxFinishBatch, as many batches at once as claims_ allows.
  BatchTurn<FinishBatchItem> finish_batches_;
  std::atomic<int64_t> finish_statements_{0};  // finish_batch_counts()
  std::atomic<int64_t> finish_statement_leases_{0};
  std::atomic<int64_t> submissions_{0};  // Queued by this store object.
};

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> OpenSqlStore(
    std::unique_ptr<SqlDriver> driver, const StoreOptions& options,
    SqlStoreHooks hooks) {
  auto store =
      std::make_unique<SqlStore>(std::move(driver), options, std::move(hooks));
  const int latest = AllMigrations().back().version;
  if (options.migrate) {
    DG_RETURN_IF_ERROR(store->Migrate());
  } else {
    DG_ASSIGN_OR_RETURN(int version, store->SchemaVersion());
    if (version != latest) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the database schema is at version ", version,
          " but this binary needs ", latest,
          version < latest ? ": run `densegate db migrate` against this store"
                           : ": run a newer densegate against this database"));
    }
  }
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace densegate::results::internal
