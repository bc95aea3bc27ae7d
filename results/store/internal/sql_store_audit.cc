// The audit log.
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

absl::StatusOr<int64_t> SqlStore::AppendAudit(const AuditEntry& entry) {
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

absl::StatusOr<std::vector<AuditEntry>> SqlStore::ListAudit(
    const AuditFilter& filter) {
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

}  // namespace densegate::results::internal::sql_store_impl
