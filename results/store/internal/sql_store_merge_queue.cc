// The merge queue: entries, their states and the branch they land on.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::StatusOr<MergeEntry> SqlStore::EnqueueMerge(absl::string_view evaluation_id,
                                        absl::string_view actor) {
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

absl::StatusOr<MergeEntry> SqlStore::UpdateMerge(absl::string_view evaluation_id,
                                       const v1::MergeStatus& status,
                                       absl::string_view actor) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  if (actor.empty()) return Invalid("actor is empty");
  switch (status.state()) {
    case v1::MERGE_QUEUED:
    case v1::MERGE_FAILED:
    case v1::AWAITING_APPROVAL:
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
          "merge state must be MERGE_QUEUED, REMEASURING, AWAITING_APPROVAL, "
          "MERGED or MERGE_FAILED, got ",
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
                    dialect_.RowLock()),
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
                    "$6, approved_by = COALESCE(NULLIF($7, ''), approved_by) "
                    "WHERE evaluation_id = $1",
                    {evaluation_id, static_cast<int>(status.state()),
                     status.merged_sha(), status.remeasure_evaluation_id(),
                     status.message(), now, status.approved_by()})
                .status());
        DG_RETURN_IF_ERROR(AuditTx(
            tx, now, actor, "merge.update", evaluation_id,
            absl::StrCat(
                v1::MergeState_Name(status.state()),
                status.merged_sha().empty() ? "" : " ", status.merged_sha(),
                status.message().empty() ? "" : ": ", status.message(),
                status.approved_by().empty() ? "" : "; approved by ",
                status.approved_by())));
        DG_ASSIGN_OR_RETURN(out, LoadMerge(tx, evaluation_id));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<MergeEntry> SqlStore::GetMergeEntry(
    absl::string_view evaluation_id) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  MergeEntry out;
  DG_RETURN_IF_ERROR(
      Run("GetMergeEntry", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
        DG_ASSIGN_OR_RETURN(out, LoadMerge(tx, evaluation_id));
        return absl::OkStatus();
      }));
  return out;
}

absl::StatusOr<std::vector<MergeEntry>> SqlStore::ListMergeQueue(
    const MergeQueueFilter& filter) {
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

}  // namespace densegate::results::internal::sql_store_impl
