// Submissions: candidates, evaluations and their jobs, listing and cancelling.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::StatusOr<SubmitResult> SqlStore::Submit(const SubmitParams& params) {
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
        // A branch's merge queue waits for its re-measures and confirmations.
        const bool remeasure = !c.remeasure_of().empty() || !c.confirms().empty();
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
  if (!dialect_.AnalyzeQueue().empty() && !result.deduplicated &&
      ++submissions_ % kSubmissionsPerQueueAnalyze == 0) {
    // Best effort: the submission stands, and a failed ANALYZE is tried
    // again after the next batch.
    (void)Run("AnalyzeQueue", TxMode::kSingleStatement, [this](SqlTx& tx) {
      return tx.ExecScript(dialect_.AnalyzeQueue());
    });
  }
  return result;
}

absl::StatusOr<v1::Evaluation> SqlStore::GetEvaluation(
    absl::string_view evaluation_id) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  v1::Evaluation out;
  DG_RETURN_IF_ERROR(
      Run("GetEvaluation", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(out, LoadEvaluation(tx, evaluation_id, true));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<v1::Evaluation> SqlStore::FindByCandidate(
    absl::string_view candidate_id) {
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

absl::StatusOr<v1::ListEvaluationsResponse> SqlStore::ListEvaluations(
    const v1::ListEvaluationsRequest& request) {
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
  if (!request.campaign().empty()) {
    absl::StrAppend(&sql, " AND c.campaign = ", arg(request.campaign()));
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

absl::StatusOr<v1::Evaluation> SqlStore::CancelEvaluation(
    absl::string_view evaluation_id, absl::string_view actor,
    absl::string_view reason) {
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
                        dialect_.RowLock()),
                    {evaluation_id, kLeaseActive})
                .status());
        DG_RETURN_IF_ERROR(
            tx.Exec(
                  absl::StrCat("SELECT id FROM jobs WHERE evaluation_id = $1",
                               dialect_.RowLock()),
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

}  // namespace densegate::results::internal::sql_store_impl
