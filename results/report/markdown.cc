// RenderMarkdown: the report model as Markdown.
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

using internal::BisectCells;
using internal::CampaignCells;
using internal::kCampaignHeaders;
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
void HeadlineAndTimeline(const Report& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Headline");
  line("");
  if (r.headline.empty()) {
    line("No candidate landed in this period.");
  } else {
    line("| metric | cumulative speedup | bracket | merges |");
    line("| --- | --- | --- | --- |");
    for (const HeadlineRow& h : r.headline) {
      line(absl::StrFormat("| %s | **%.2fx** | [%.2f, %.2f] | %d |", h.metric, h.cumulative, h.low,
                           h.high, h.merges));
    }
    line("");
    line("Cumulative: the product of the landed candidates' speedups; the bracket "
         "multiplies their interval ends.");
  }
  line("");
  line("## Timeline of landed commits");
  for (const auto& [metric, steps] : r.timeline) {
    line("");
    line(absl::StrCat("### ", metric));
    line("");
    line("| landed | commit | evaluation | step | cumulative | value |");
    line("| --- | --- | --- | --- | --- | --- |");
    for (const TimelineStep& s : steps) {
      line(absl::StrFormat("| %s | %s | %s | %.3fx%s | %.3fx | %s |", s.decided_at, s.merged_sha,
                           s.evaluation, s.speedup,
                           s.inputs_identical ? " (inputs identical)" : "", s.cumulative,
                           s.value ? absl::StrFormat("%g %s", *s.value, s.unit) : "-"));
    }
  }
}

// The rejected candidates, grouped by the reason that decided them.
void Rejected(const Report& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Rejected, by reason");
  if (r.rejected.empty()) {
    line("");
    line("Nothing was rejected.");
  }
  for (const auto& [code, rows] : r.rejected) {
    line("");
    line(absl::StrFormat("### %s (%d)", code, rows.size()));
    line("");
    for (const CandidateRow& c : rows) {
      line(absl::StrFormat("- %s by %s: %s", c.commit, c.submitter,
                           c.reason ? c.reason->message : ""));
    }
  }
}

// The precision curves, one table per suite and commit.
void Precision(const Report& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Precision: error against fp64 by context length");
  if (r.precision.empty()) {
    line("");
    line("No evaluation in this period ran a precision suite.");
  }
  for (const PrecisionChart& p : r.precision) {
    line("");
    line(absl::StrFormat("### %s, %s (%s, %s); bound %g", p.suite, p.commit, p.evaluation,
                         p.decision, p.bound));
    line("");
    line("| tokens | baseline rel_rms | candidate rel_rms |");
    line("| --- | --- | --- |");
    for (size_t i = 0; i < p.candidate.size(); ++i) {
      line(absl::StrFormat("| %d | %s | %.3g |", p.candidate[i].first,
                           i < p.baseline.size() ? absl::StrFormat("%.3g", p.baseline[i].second)
                                                 : "-",
                           p.candidate[i].second));
    }
  }
}

// Each bisection with its steps.
void Bisections(const Report& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Bisections");
  if (r.bisections.empty()) {
    line("");
    line("No bisection in this period.");
  }
  for (const Bisection& b : r.bisections) {
    line("");
    line(absl::StrFormat("### %s over %s (%d commits): culprit %s", b.metric, b.range, b.commits,
                         b.culprit ? b.culprit->commit : "not found yet"));
    line("");
    md += MarkdownTable(kBisectHeaders, Rows(b.steps, BisectCells));
  }
}

// Each campaign's accepted experiments: claimed, measured, confirmed.
void Campaigns(const Report& r, std::string* out) {
  std::string& md = *out;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  line("## Campaigns: claimed against confirmed");
  if (r.campaigns.empty()) {
    line("");
    line("No campaign's experiment was accepted toward a branch in this period.");
  }
  for (const CampaignRow& c : r.campaigns) {
    line("");
    line(absl::StrFormat("### %s: %d landed", c.campaign, c.landed));
    line("");
    md += MarkdownTable(kCampaignHeaders, Rows(c.experiments, CampaignCells));
  }
}

}  // namespace

std::string RenderMarkdown(const Report& r) {
  std::string md;
  auto line = [&](const std::string& text) { absl::StrAppend(&md, text, "\n"); };
  const std::string scope =
      absl::StrCat(r.repo.empty() ? "all repositories" : r.repo,
                   r.branch.empty() ? "" : ", branch " + r.branch,
                   r.since ? ", since " + *r.since : "");
  line("# densegate report");
  line("");
  line(absl::StrCat(scope, "; generated ", r.generated_at, "."));
  line("");
  HeadlineAndTimeline(r, &md);
  line("");
  if (!r.awaiting_approval.empty()) {
    line("## Awaiting approval");
    line("");
    line("Accepted, and held by their branch's policy for a person: `densegate approve ID` or "
         "`densegate decline ID --reason TEXT`.");
    line("");
    md += MarkdownTable(kCandidateHeaders, Rows(r.awaiting_approval, CandidateCells));
    line("");
  }
  line("## Candidates");
  line("");
  if (r.candidates.empty()) {
    line("No evaluation finished in this period.");
  } else {
    md += MarkdownTable(kCandidateHeaders, Rows(r.candidates, CandidateCells));
  }
  line("");
  Rejected(r, &md);
  line("");
  Precision(r, &md);
  line("");
  Bisections(r, &md);
  line("");
  Campaigns(r, &md);
  line("");
  line("## Change points");
  line("");
  if (r.change_points.empty()) {
    line(kNoChangePoints);
  } else {
    md += MarkdownTable(kChangePointHeaders, Rows(r.change_points, ChangePointCells));
  }
  line("");
  line("## Nodes");
  line("");
  if (r.nodes.empty()) {
    line("No node registered.");
  } else {
    md += MarkdownTable(kNodeHeaders, Rows(r.nodes, NodeCells));
  }
  return md;
}

}  // namespace densegate::results
