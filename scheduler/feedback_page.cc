// GET /feedback: an evaluation's feedback bundle over HTTP, for the links
// of the report page (the CLI and agents use GetFeedback).
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "results/feedback/bundle.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

HttpResponse Scheduler::FeedbackPage(const HttpRequest& request) {
  if (std::optional<HttpResponse> denied = DenyPage(request)) return *denied;
  const std::string id = request.Query("evaluation");
  const std::string file = request.Query("file");
  if (id.empty()) return {400, "text/plain; charset=utf-8", "?evaluation=ID is required\n"};
  absl::StatusOr<results::FeedbackRecord> rec = store_->GetFeedback(id, !file.empty());
  if (!rec.ok()) {
    return {absl::IsNotFound(rec.status()) ? 404 : 500, "text/plain; charset=utf-8",
            absl::StrCat(rec.status().message(), "\n")};
  }
  if (file.empty()) return {200, "application/json", rec->summary_json};
  for (const v1::FeedbackFile& f : rec->bundle.files()) {
    if (f.path() != file) continue;
    // Served as data, never as a page: a candidate's log must not run
    // script in a viewer's browser.
    return {200, absl::EndsWith(file, ".json") ? "application/json" : "text/plain; charset=utf-8",
            f.content()};
  }
  if (rec->files_dropped_at != absl::InfinitePast()) {
    return {410, "text/plain; charset=utf-8",
            absl::StrCat("the files of ", id,
                         "'s bundle were dropped by the retention rule; its summary is kept\n")};
  }
  return {404, "text/plain; charset=utf-8", absl::StrCat(id, "'s bundle has no file ", file, "\n")};
}

}  // namespace densegate::scheduler
