// The queue: claims, leases, finishing and reclaiming them, counts.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::StatusOr<int64_t> SqlStore::CountQueuedOverNoiseLimit(double noise) {
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

absl::StatusOr<int64_t> SqlStore::EnqueueCalibration(absl::string_view node_id,
                                           int32_t max_attempts) {
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
                                 dialect_.RowLock()),
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

absl::StatusOr<std::vector<v1::Lease>> SqlStore::ClaimJobs(
    const ClaimRequest& request) {
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
    if (dialect_.OneStatementWrites()) {
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

absl::StatusOr<LeaseRenewal> SqlStore::RenewLease(const LeaseRef& ref,
                                        absl::Duration ttl) {
  DG_RETURN_IF_ERROR(ValidateRef(ref));
  if (ttl <= absl::ZeroDuration()) return Invalid("ttl must be positive");
  const int64_t now = NowUs();
  const int64_t expires = now + absl::ToInt64Microseconds(ttl);
  LeaseRenewal out;
  if (dialect_.OneStatementWrites()) {
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
                            tx.Exec(absl::StrCat(kLeaseColumns, dialect_.RowLock()),
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

absl::Status SqlStore::FinishLease(const LeaseRef& ref,
                         const v1::Verdict& verdict) {
  const int64_t now = NowUs();
  DG_ASSIGN_OR_RETURN(StoredVerdict v, PrepareVerdict(ref, verdict, now));
  if (dialect_.OneStatementWrites()) {
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

absl::StatusOr<NextClaim> SqlStore::FinishLeaseAndClaimNext(
    const LeaseRef& ref, const v1::Verdict& verdict,
    absl::Duration lease_duration) {
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
  if (dialect_.OneStatementWrites()) {
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

FinishBatchCounts SqlStore::finish_batch_counts() const {
  return {finish_statements_.load(std::memory_order_relaxed),
          finish_statement_leases_.load(std::memory_order_relaxed)};
}

absl::Status SqlStore::FinishCalibration(const LeaseRef& ref, double noise,
                               v1::NodeState new_state) {
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

absl::StatusOr<v1::EvaluationState> SqlStore::FailLease(
    const LeaseRef& ref, absl::string_view error) {
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

absl::StatusOr<std::vector<ReclaimedLease>> SqlStore::ReclaimExpiredLeases(
    int limit) {
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
                    dialect_.SkipLockedRowLock()),
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

absl::StatusOr<QueueCounts> SqlStore::CountJobs() {
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

}  // namespace densegate::results::internal::sql_store_impl
