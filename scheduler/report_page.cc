// The regression report, over gRPC (GetReport) and HTTP (GET /report).
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/rpc_util.h"
#include "google/protobuf/util/time_util.h"
#include "results/report/report.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

using internal::Now;

absl::StatusOr<v1::Report> Scheduler::RenderReport(const v1::GetReportRequest& request) {
  results::ReportRequest r;
  r.repo = request.repo();
  r.branch = request.branch();
  if (request.has_since()) {
    r.since = absl::FromUnixNanos(
        google::protobuf::util::TimeUtil::TimestampToNanoseconds(request.since()));
  }
  absl::StatusOr<results::Report> data = results::BuildReport(*store_, r, absl::Now());
  if (!data.ok()) return data.status();
  v1::Report report;
  report.set_format(request.format() == v1::REPORT_FORMAT_UNSPECIFIED ? v1::HTML
                                                                       : request.format());
  switch (report.format()) {
    case v1::MARKDOWN:
      report.set_content_type("text/markdown; charset=utf-8");
      report.set_content(results::RenderMarkdown(*data));
      break;
    case v1::JSON:
      report.set_content_type("application/json");
      report.set_content(results::ReportToJson(*data).dump(2));
      break;
    default:
      report.set_content_type("text/html; charset=utf-8");
      report.set_content(results::RenderHtml(*data));
  }
  *report.mutable_generated_at() = Now();
  return report;
}

HttpResponse Scheduler::ReportPage(const HttpRequest& request) {
  auto query = [&](const char* key) {
    auto it = request.query.find(key);
    return it == request.query.end() ? std::string() : it->second;
  };
  const std::string token = query("token");
  absl::StatusOr<Principal> who = auth_.AuthorizeBearer(
      token.empty() ? request.authorization : "Bearer " + token,
      {Role::kViewer, Role::kCi, Role::kAgent});
  if (!who.ok()) {
    return {absl::IsPermissionDenied(who.status()) ? 403 : 401, "text/plain; charset=utf-8",
            absl::StrCat(who.status().message(), "\n")};
  }
  v1::GetReportRequest r;
  r.set_repo(query("repo"));
  r.set_branch(query("branch"));
  const std::string format = query("format");
  if (format == "md") {
    r.set_format(v1::MARKDOWN);
  } else if (format == "json") {
    r.set_format(v1::JSON);
  } else if (!format.empty() && format != "html") {
    return {400, "text/plain; charset=utf-8", "format must be html, md or json\n"};
  }
  absl::StatusOr<v1::Report> report = RenderReport(r);
  if (!report.ok()) {
    return {500, "text/plain; charset=utf-8", absl::StrCat(report.status().message(), "\n")};
  }
  return {200, report->content_type(), report->content()};
}

}  // namespace densegate::scheduler
