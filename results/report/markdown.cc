// RenderMarkdown: the report's JSON as Markdown.
#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "results/report/internal/cells.h"
#include "results/report/report.h"

namespace densegate::results {
namespace {

using json = nlohmann::json;
using internal::BisectCells;
using internal::CandidateCells;
using internal::ChangePointCells;
using internal::kBisectHeaders;
using internal::kCandidateHeaders;
using internal::kChangePointHeaders;
using internal::kNodeHeaders;
using internal::kNoChangePoints;
using internal::NodeCells;
using internal::Rows;

std::string MarkdownTable(const std::vector<std::string>& headers,
                          const std::vector<std::vector<std::string>>& rows) {
  auto row = [](const std::vector<std::string>& cells) {
    std::vector<std::string> escaped;
    for (const std::string& c : cells) {
      escaped.push_back(absl::StrReplaceAll(c, {{"|", "\\|"}, {"\n", " "}}));
    }
    return absl::StrCat("| ", absl::StrJoin(escaped, " | "), " |\n");
  };
  std::string out = row(headers);
  out += row(std::vector<std::string>(headers.size(), "---"));
  for (const auto& r : rows) out += row(r);
  return out;
}

// The headline (cumulative speedups) and the timeline of landed commits.
void HeadlineAndTimeline(const json& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Headline");
  line("");
  if (r["headline"].empty()) {
    line("No candidate landed in this period.");
  } else {
    line("| metric | cumulative speedup | bracket | merges |");
    line("| --- | --- | --- | --- |");
    for (const json& h : r["headline"]) {
      line(absl::StrFormat("| %s | **%.2fx** | [%.2f, %.2f] | %d |", h["metric"].get<std::string>(),
                           h["cumulative"].get<double>(), h["low"].get<double>(),
                           h["high"].get<double>(), h["merges"].get<int>()));
    }
    line("");
    line("Cumulative: the product of the landed candidates' speedups; the bracket "
         "multiplies their interval ends.");
  }
  line("");
  line("## Timeline of landed commits");
  for (const auto& [metric, steps] : r["timeline"].items()) {
    line("");
    line(absl::StrCat("### ", metric));
    line("");
    line("| landed | commit | evaluation | step | cumulative | value |");
    line("| --- | --- | --- | --- | --- | --- |");
    for (const json& s : steps) {
      line(absl::StrFormat(
          "| %s | %s | %s | %.3fx%s | %.3fx | %s |", s["decided_at"].get<std::string>(),
          s["merged_sha"].get<std::string>(), s["evaluation"].get<std::string>(),
          s["speedup"].get<double>(), s["inputs_identical"].get<bool>() ? " (inputs identical)" : "",
          s["cumulative"].get<double>(),
          s["value"].is_null() ? "-"
                               : absl::StrFormat("%g %s", s["value"].get<double>(),
                                                 s["unit"].get<std::string>())));
    }
  }
}

// The rejected candidates, grouped by the reason that decided them.
void Rejected(const json& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Rejected, by reason");
  if (r["rejected"].empty()) {
    line("");
    line("Nothing was rejected.");
  }
  for (const auto& [code, rows] : r["rejected"].items()) {
    line("");
    line(absl::StrFormat("### %s (%d)", code, rows.size()));
    line("");
    for (const json& c : rows) {
      line(absl::StrFormat("- %s by %s: %s", c["commit"].get<std::string>(),
                           c["submitter"].get<std::string>(),
                           c.contains("reason") ? c["reason"]["message"].get<std::string>() : ""));
    }
  }
}

// The precision curves, one table per suite and commit.
void Precision(const json& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Precision: error against fp64 by context length");
  if (r["precision"].empty()) {
    line("");
    line("No evaluation in this period ran a precision suite.");
  }
  for (const json& p : r["precision"]) {
    line("");
    line(absl::StrFormat("### %s, %s (%s, %s); bound %g", p["suite"].get<std::string>(),
                         p["commit"].get<std::string>(), p["evaluation"].get<std::string>(),
                         p["decision"].get<std::string>(), p["bound"].get<double>()));
    line("");
    line("| tokens | baseline rel_rms | candidate rel_rms |");
    line("| --- | --- | --- |");
    for (size_t i = 0; i < p["candidate"].size(); ++i) {
      line(absl::StrFormat("| %d | %s | %.3g |", p["candidate"][i][0].get<int64_t>(),
                           i < p["baseline"].size()
                               ? absl::StrFormat("%.3g", p["baseline"][i][1].get<double>())
                               : "-",
                           p["candidate"][i][1].get<double>()));
    }
  }
}

// Each bisection with its steps.
void Bisections(const json& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Bisections");
  if (r["bisections"].empty()) {
    line("");
    line("No bisection in this period.");
  }
  for (const json& b : r["bisections"]) {
    line("");
    line(absl::StrFormat("### %s over %s (%d commits): culprit %s", b["metric"].get<std::string>(),
                         b["range"].get<std::string>(), b["commits"].get<int>(),
                         b["culprit"].is_null() ? "not found yet"
                                                : b["culprit"]["commit"].get<std::string>()));
    line("");
    md += MarkdownTable(kBisectHeaders, Rows(b["steps"], BisectCells));
  }
}

}  // namespace

std::string RenderMarkdown(const json& r) {
  std::string md;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  const std::string scope = absl::StrCat(
      r["repo"].get<std::string>().empty() ? "all repositories" : r["repo"].get<std::string>(),
      r["branch"].get<std::string>().empty() ? "" : ", branch " + r["branch"].get<std::string>(),
      r["since"].is_null() ? "" : ", since " + r["since"].get<std::string>());
  line("# densegate report");
  line("");
  line(absl::StrCat(scope, "; generated ", r["generated_at"].get<std::string>(), "."));
  line("");
  HeadlineAndTimeline(r, &md);
  line("");
  line("## Candidates");
  line("");
  if (r["candidates"].empty()) {
    line("No evaluation finished in this period.");
  } else {
    md += MarkdownTable(kCandidateHeaders, Rows(r["candidates"], CandidateCells));
  }
  line("");
  Rejected(r, &md);
  line("");
  Precision(r, &md);
  line("");
  Bisections(r, &md);
  line("");
  line("## Change points");
  line("");
  if (r["change_points"].empty()) {
    line(kNoChangePoints);
  } else {
    md += MarkdownTable(kChangePointHeaders, Rows(r["change_points"], ChangePointCells));
  }
  line("");
  line("## Nodes");
  line("");
  if (r["nodes"].empty()) {
    line("No node registered.");
  } else {
    md += MarkdownTable(kNodeHeaders, Rows(r["nodes"], NodeCells));
  }
  return md;
}

}  // namespace densegate::results
