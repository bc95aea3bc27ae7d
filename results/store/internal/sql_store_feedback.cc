// Feedback bundles: one per evaluation, deflated, with a retention rule per
// branch that drops old bundles' files and keeps their summaries.
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "results/feedback/bundle.h"
#include "results/store/internal/deflate.h"
#include "results/store/internal/sql_store_impl.h"

namespace densegate::results::internal::sql_store_impl {

namespace {
// Summaries are a few KiB; a node that sends more is not writing feedback.json.
constexpr size_t kMaxSummaryBytes = 1 << 20;
}  // namespace

absl::Status SqlStore::PutFeedback(const LeaseRef& ref, const v1::FeedbackBundle& bundle,
                                   absl::string_view summary_json,
                                   const FeedbackPolicy& policy) {
  DG_RETURN_IF_ERROR(ValidateRef(ref));
  DG_RETURN_IF_ERROR(CheckBundle(bundle, policy.max_bytes));
  if (summary_json.size() > kMaxSummaryBytes) {
    return Invalid(absl::StrCat("the feedback summary holds ", summary_json.size(),
                                " bytes; at most ", kMaxSummaryBytes));
  }
  // Read back as a protobuf string, which must be UTF-8.
  if (!IsValidUtf8(summary_json)) return Invalid("the feedback summary is not UTF-8");
  // The omitted list rides along in the blob; the column is what is read.
  DG_ASSIGN_OR_RETURN(std::string content, Deflate(bundle.SerializeAsString()));
  const int64_t now = NowUs();
  return Run("PutFeedback", TxMode::kWrite, [&](SqlTx& tx) -> absl::Status {
    DG_ASSIGN_OR_RETURN(LeaseRow lease, SharedLiveLease(tx, ref, now));
    DG_ASSIGN_OR_RETURN(
        SqlResult branch,
        tx.Exec("SELECT c.repo_id, c.target_branch FROM evaluations e JOIN candidates c ON "
                "c.id = e.candidate_id WHERE e.id = $1",
                {lease.evaluation_id}));
    if (branch.rows.empty()) {
      return absl::NotFoundError(absl::StrCat("evaluation ", lease.evaluation_id, " not found"));
    }
    const int64_t repo_id = branch.rows[0].Int(0);
    const std::string target_branch = branch.rows[0].Text(1);
    DG_RETURN_IF_ERROR(
        tx.Exec("INSERT INTO feedback_bundles (evaluation_id, lease_id, repo_id, target_branch, "
                "summary, content_encoding, content, files, bytes, omitted, recorded_at_us, "
                "files_dropped_at_us) VALUES ($1, $2, $3, $4, $5, 'deflate', $6, $7, $8, $9, "
                "$10, 0) ON CONFLICT (evaluation_id) DO UPDATE SET lease_id = $2, summary = $5, "
                "content = $6, files = $7, bytes = $8, omitted = $9, recorded_at_us = $10, "
                "files_dropped_at_us = 0",
                {lease.evaluation_id, lease.id, repo_id, target_branch, summary_json,
                 Bytes{std::move(content)}, bundle.files_size(), BundleBytes(bundle),
                 absl::StrJoin(bundle.omitted(), "\n"), now})
            .status());
    if (policy.keep_per_branch < 1) return absl::OkStatus();
    // The newest keep_per_branch of the branch keep their files.
    return tx
        .Exec("UPDATE feedback_bundles SET content = $4, files_dropped_at_us = $5 WHERE "
              "repo_id = $1 AND target_branch = $2 AND files_dropped_at_us = 0 AND "
              "evaluation_id NOT IN (SELECT evaluation_id FROM feedback_bundles WHERE repo_id "
              "= $1 AND target_branch = $2 ORDER BY recorded_at_us DESC, evaluation_id DESC "
              "LIMIT $3)",
              {repo_id, target_branch, policy.keep_per_branch, Bytes{""}, now})
        .status();
  });
}

absl::StatusOr<FeedbackRecord> SqlStore::GetFeedback(absl::string_view evaluation_id,
                                                     bool with_files) {
  if (evaluation_id.empty()) return Invalid("evaluation id is empty");
  FeedbackRecord rec;
  std::string content;
  DG_RETURN_IF_ERROR(Run("GetFeedback", TxMode::kRead, [&](SqlTx& tx) -> absl::Status {
    DG_RETURN_IF_ERROR(RequireEvaluation(tx, evaluation_id));
    DG_ASSIGN_OR_RETURN(
        SqlResult r,
        tx.Exec(absl::StrCat("SELECT lease_id, summary, files, bytes, omitted, recorded_at_us, "
                             "files_dropped_at_us, content_encoding",
                             with_files ? ", content" : "",
                             " FROM feedback_bundles WHERE evaluation_id = $1"),
                {evaluation_id}));
    if (r.rows.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "evaluation ", evaluation_id,
          " has no feedback bundle yet: its node uploads one when the evaluation ends"));
    }
    const SqlRow& row = r.rows[0];
    rec.evaluation_id = std::string(evaluation_id);
    rec.lease_id = row.Text(0);
    rec.summary_json = row.Text(1);
    rec.files = static_cast<int32_t>(row.Int(2));
    rec.bytes = row.Int(3);
    for (absl::string_view p : absl::StrSplit(row.Text(4), '\n', absl::SkipEmpty())) {
      rec.bundle.add_omitted(std::string(p));
    }
    rec.recorded_at = FromUs(row.Int(5));
    if (row.Int(6) > 0) rec.files_dropped_at = FromUs(row.Int(6));
    if (row.Text(7) != "deflate") {
      return absl::DataLossError(absl::StrCat("feedback bundle of ", evaluation_id,
                                              " has unknown encoding \"", row.Text(7), "\""));
    }
    if (with_files && row.Int(6) == 0) content = row.Bytes(8);
    return absl::OkStatus();
  }));
  if (!content.empty()) {
    DG_ASSIGN_OR_RETURN(std::string serialized,
                        Inflate(content, rec.bytes + 600 * int64_t{rec.files} + 1024));
    v1::FeedbackBundle files;
    if (!files.ParseFromString(serialized)) {
      return absl::DataLossError(
          absl::StrCat("stored feedback bundle of ", evaluation_id, " does not parse"));
    }
    *rec.bundle.mutable_files() = std::move(*files.mutable_files());
  }
  return rec;
}

}  // namespace densegate::results::internal::sql_store_impl
