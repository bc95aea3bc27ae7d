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

absl::StatusOr<v1::Report> Scheduler::RenderReport(const v1::GetReportRequest& request,
                                                   const std::string& feedback_link_prefix) {
  results::ReportRequest r;
  r.repo = request.repo();
  r.branch = request.branch();
  if (request.has_since()) {
    r.since = absl::FromUnixNanos(
        google::protobuf::util::TimeUtil::TimestampToNanoseconds(request.since()));
  }
  absl::StatusOr<results::Report> data = results::BuildReport(*store_, r, absl::Now());
  if (!data.ok()) return data.status();
  data->feedback_link_prefix = feedback_link_prefix;
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

namespace {

// For a query value: unreserved characters as they are, the rest %XX.
std::string PercentEncode(absl::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
  return out;
}

}  // namespace

std::optional<HttpResponse> Scheduler::DenyPage(const HttpRequest& request) {
  const std::string token = request.Query("token");
  absl::StatusOr<Principal> who = auth_.AuthorizeBearer(
      token.empty() ? request.authorization : "Bearer " + token,
      {Role::kViewer, Role::kCi, Role::kAgent, Role::kMaintainer});
  if (who.ok()) return std::nullopt;
  return HttpResponse{absl::IsPermissionDenied(who.status()) ? 403 : 401,
                      "text/plain; charset=utf-8", absl::StrCat(who.status().message(), "\n")};
}

HttpResponse Scheduler::ReportPage(const HttpRequest& request) {
  if (std::optional<HttpResponse> denied = DenyPage(request)) return *denied;
  v1::GetReportRequest r;
  r.set_repo(request.Query("repo"));
  r.set_branch(request.Query("branch"));
  const std::string format = request.Query("format");
  if (format == "md") {
    r.set_format(v1::MARKDOWN);
  } else if (format == "json") {
    r.set_format(v1::JSON);
  } else if (!format.empty() && format != "html") {
    return {400, "text/plain; charset=utf-8", "format must be html, md or json\n"};
  }
  // The page's links to /feedback carry the token the page was opened with.
  const std::string token = request.Query("token");
  absl::StatusOr<v1::Report> report = RenderReport(
      r, token.empty() ? "feedback?evaluation="
                       : absl::StrCat("feedback?token=", PercentEncode(token), "&evaluation="));
  if (!report.ok()) {
    return {500, "text/plain; charset=utf-8", absl::StrCat(report.status().message(), "\n")};
  }
  return {200, report->content_type(), report->content()};
}

}  // namespace densegate::scheduler
