// RenderHtml: the report model as one self-contained page (inline CSS and
// SVG charts).
#include <algorithm>
#include <cmath>
#include <cstdio>

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
using internal::FeedbackCommand;
using internal::ChangePointCells;
using internal::kBisectHeaders;
using internal::kCandidateHeaders;
using internal::kChangePointHeaders;
using internal::kNodeHeaders;
using internal::kNoChangePoints;
using internal::NodeCells;
using internal::Rows;


std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// One metric's cumulative speedup over its landed commits: a line with a
// band for the bracket, the y axis in "x" (speedup vs the first version)
// with gridlines, x labels every few commits so they never overlap.
std::string Chart(const std::string& metric, const std::vector<TimelineStep>& steps) {
  constexpr double kW = 640, kH = 260, kLeft = 56, kRight = 16, kTop = 28, kBottom = 44;
  const size_t n = steps.size() + 1;  // The first version, then each landing.
  std::vector<double> mid = {1.0}, low = {1.0}, high = {1.0};
  std::vector<std::string> labels = {"first"};
  for (const TimelineStep& s : steps) {
    mid.push_back(s.cumulative);
    low.push_back(s.cumulative_low);
    high.push_back(s.cumulative_high);
    labels.push_back(s.merged_sha.substr(0, 7));
  }
  double y_max = std::max(1.0, *std::max_element(high.begin(), high.end()));
  double y_min = std::min(1.0, *std::min_element(low.begin(), low.end()));
  const double pad = (y_max - y_min) * 0.08 + 0.05;
  y_max += pad;
  y_min = std::max(0.0, y_min - pad);
  auto x = [&](size_t i) {
    return kLeft + (n == 1 ? 0.5 : static_cast<double>(i) / (n - 1)) * (kW - kLeft - kRight);
  };
  auto y = [&](double v) { return kTop + (y_max - v) / (y_max - y_min) * (kH - kTop - kBottom); };
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %g %g\" width=\"%g\" height=\"%g\" role=\"img\" "
      "aria-label=\"cumulative speedup of %s\">\n",
      kW, kH, kW, kH, Escape(metric));
  // Gridlines and y labels at 5 even steps.
  for (int t = 0; t <= 4; ++t) {
    const double v = y_min + (y_max - y_min) * t / 4;
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"grid\"/>"
                          "<text x=\"%g\" y=\"%.1f\" class=\"ylabel\">%.2fx</text>\n",
                          kLeft, y(v), kW - kRight, y(v), kLeft - 6, y(v) + 4, v);
  }
  // Baseline at 1x.
  absl::StrAppendFormat(&svg,
                        "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"unity\"/>\n",
                        kLeft, y(1.0), kW - kRight, y(1.0));
  // Band: high along, low back.
  std::string band;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&band, "%.1f,%.1f ", x(i), y(high[i]));
  for (size_t i = n; i-- > 0;) absl::StrAppendFormat(&band, "%.1f,%.1f ", x(i), y(low[i]));
  absl::StrAppendFormat(&svg, "<polygon class=\"band\" points=\"%s\"/>\n", band);
  std::string line;
  for (size_t i = 0; i < n; ++i) absl::StrAppendFormat(&line, "%.1f,%.1f ", x(i), y(mid[i]));
  absl::StrAppendFormat(&svg, "<polyline class=\"series\" points=\"%s\"/>\n", line);
  // X labels: at most 8, evenly spread.
  const size_t every = std::max<size_t>(1, (n + 7) / 8);
  for (size_t i = 0; i < n; ++i) {
    absl::StrAppendFormat(&svg, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" class=\"point\"/>\n",
                          x(i), y(mid[i]));
    if (i % every == 0 || i == n - 1) {
      absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" class=\"xlabel\">%s</text>\n", x(i),
                            kH - kBottom + 16, Escape(labels[i]));
    }
  }
  absl::StrAppendFormat(&svg,
                        "<text x=\"%g\" y=\"%g\" class=\"axis\">landed commits (oldest first)</text>\n"
                        "<text x=\"12\" y=\"%g\" class=\"axis\" transform=\"rotate(-90 12 %g)\">"
                        "speedup vs first version (x)</text>\n",
                        (kLeft + kW - kRight) / 2, kH - 6, kH / 2, kH / 2);
  // Legend.
  absl::StrAppendFormat(&svg,
                        "<rect x=\"%g\" y=\"6\" width=\"14\" height=\"8\" class=\"band\"/>"
                        "<text x=\"%g\" y=\"14\" class=\"legend\">bracket (interval ends "
                        "multiplied)</text>"
                        "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series\"/>"
                        "<text x=\"%g\" y=\"14\" class=\"legend\">cumulative speedup</text>\n",
                        kLeft, kLeft + 18, kLeft + 230, kLeft + 248, kLeft + 252);
  svg += "</svg>\n";
  return svg;
}

// Error vs context length, log-log: baseline and candidate curves, the
// suite's bound as a dashed line, a legend.
std::string PrecisionSvg(const PrecisionChart& p) {
  constexpr double kW = 640, kH = 260, kLeft = 64, kRight = 16, kTop = 28, kBottom = 44;
  double x_lo = 1e300, x_hi = 0, y_lo = p.bound, y_hi = y_lo;
  for (const auto* curve : {&p.baseline, &p.candidate}) {
    for (const auto& [length, rel_rms] : *curve) {
      x_lo = std::min(x_lo, static_cast<double>(length));
      x_hi = std::max(x_hi, static_cast<double>(length));
      if (rel_rms > 0) {
        y_lo = std::min(y_lo, rel_rms);
        y_hi = std::max(y_hi, rel_rms);
      }
    }
  }
  if (!(x_hi > x_lo)) x_hi = x_lo * 2;
  if (!(y_lo > 0)) y_lo = 1e-9;
  // Whole decades on the y axis.
  const int d_lo = static_cast<int>(std::floor(std::log10(y_lo)));
  const int d_hi = std::max(d_lo + 1, static_cast<int>(std::ceil(std::log10(y_hi))));
  auto x = [&](double v) {
    return kLeft + (std::log2(v) - std::log2(x_lo)) / (std::log2(x_hi) - std::log2(x_lo)) *
                       (kW - kLeft - kRight);
  };
  auto y = [&](double v) {
    return kTop + (d_hi - std::log10(std::max(v, 1e-300))) / (d_hi - d_lo) * (kH - kTop - kBottom);
  };
  std::string svg = absl::StrFormat(
      "<svg class=\"chart\" viewBox=\"0 0 %g %g\" width=\"%g\" height=\"%g\" role=\"img\" "
      "aria-label=\"precision of %s\">\n",
      kW, kH, kW, kH, Escape(p.suite));
  for (int d = d_lo; d <= d_hi; ++d) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"grid\"/>"
                          "<text x=\"%g\" y=\"%.1f\" class=\"ylabel\">1e%d</text>\n",
                          kLeft, y(std::pow(10.0, d)), kW - kRight, y(std::pow(10.0, d)), kLeft - 6,
                          y(std::pow(10.0, d)) + 4, d);
  }
  const double bound = p.bound;
  if (bound > 0) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" class=\"unity\"/>\n",
                          kLeft, y(bound), kW - kRight, y(bound));
  }
  for (const auto* curve : {&p.baseline, &p.candidate}) {
    std::string points;
    for (const auto& [length, rel_rms] : *curve) {
      absl::StrAppendFormat(&points, "%.1f,%.1f ", x(static_cast<double>(length)), y(rel_rms));
    }
    absl::StrAppendFormat(&svg, "<polyline class=\"%s\" points=\"%s\"/>\n",
                          curve == &p.baseline ? "series-b" : "series", points);
  }
  for (const auto& [length, rel_rms] : p.candidate) {
    const double len = static_cast<double>(length);
    absl::StrAppendFormat(&svg, "<text x=\"%.1f\" y=\"%g\" class=\"xlabel\">%s</text>\n", x(len),
                          kH - kBottom + 16,
                          len >= 1024 ? absl::StrCat(static_cast<int64_t>(len) / 1024, "k")
                                      : absl::StrCat(static_cast<int64_t>(len)));
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%g\" y=\"%g\" class=\"axis\">context length (tokens, log scale)</text>\n"
      "<text x=\"12\" y=\"%g\" class=\"axis\" transform=\"rotate(-90 12 %g)\">rel_rms vs fp64 "
      "(log)</text>\n"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series-b\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">baseline</text>"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"series\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">candidate</text>"
      "<line x1=\"%g\" y1=\"10\" x2=\"%g\" y2=\"10\" class=\"unity\"/>"
      "<text x=\"%g\" y=\"14\" class=\"legend\">bound %g</text>\n</svg>\n",
      (kLeft + kW - kRight) / 2, kH - 6, kH / 2, kH / 2, kLeft, kLeft + 18, kLeft + 22,
      kLeft + 100, kLeft + 118, kLeft + 122, kLeft + 210, kLeft + 228, kLeft + 232, bound);
  return svg;
}

// Rows as an HTML table with the given columns.
// `last_cells`, when given, replaces each row's last cell with markup of
// its own (already escaped).
std::string Table(const std::vector<std::string>& headers,
                  const std::vector<std::vector<std::string>>& rows,
                  const std::vector<std::string>& last_cells = {}) {
  std::string html = "<table><thead><tr>";
  for (const std::string& h : headers) absl::StrAppend(&html, "<th>", Escape(h), "</th>");
  html += "</tr></thead><tbody>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    html += "<tr>";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const bool own = !last_cells.empty() && c + 1 == rows[r].size();
      absl::StrAppend(&html, "<td>", own ? last_cells[r] : Escape(rows[r][c]), "</td>");
    }
    html += "</tr>\n";
  }
  return html + "</tbody></table>\n";
}

// Each candidate's feedback: a link to the scheduler's page when the report
// is served there, the command that shows it otherwise.
std::vector<std::string> CandidateFeedbackLinks(const std::vector<CandidateRow>& rows,
                                                const std::string& link_prefix) {
  std::vector<std::string> cells;
  for (const CandidateRow& c : rows) {
    if (!c.has_feedback) {
      cells.push_back("-");
    } else if (link_prefix.empty()) {
      cells.push_back(absl::StrCat("<span title=\"", Escape(c.feedback_headline), "\">",
                                   Escape(FeedbackCommand(c)), "</span>"));
    } else {
      cells.push_back(absl::StrCat("<a class=\"feedback\" href=\"",
                                   Escape(link_prefix + c.evaluation), "\" title=\"",
                                   Escape(c.feedback_headline), "\">feedback</a>"));
    }
  }
  return cells;
}

constexpr char kStyle[] = R"css(
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #1d2733; }
h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; border-bottom: 1px solid #d5dbe3; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #d5dbe3; border-radius: 6px; padding: 10px 14px; min-width: 180px; }
.card .value { font-size: 26px; font-weight: 600; } .card .sub { color: #5b6775; font-size: 12px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { border-bottom: 1px solid #e6eaef; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #f3f5f8; }
.chart .grid { stroke: #e6eaef; } .chart .unity { stroke: #9aa5b1; stroke-dasharray: 4 3; }
.chart .band { fill: #4c8bf5; fill-opacity: 0.18; stroke: none; }
.chart .series { fill: none; stroke: #1f5fd0; stroke-width: 2; } .chart .point { fill: #1f5fd0; }
.chart .series-b { fill: none; stroke: #8a94a0; stroke-width: 2; stroke-dasharray: 6 3; }
.chart text { font-size: 11px; fill: #3b4754; } .chart .ylabel { text-anchor: end; }
.chart .xlabel { text-anchor: middle; } .chart .axis { text-anchor: middle; font-size: 12px; }
.muted { color: #5b6775; }
)css";

}  // namespace

std::string RenderHtml(const Report& r) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>densegate report</title><style>";
  html += kStyle;
  html += "</style></head><body>\n<h1>densegate report</h1>\n";
  absl::StrAppend(&html, "<p class=\"muted\">",
                  Escape(r.repo.empty() ? "all repositories" : r.repo),
                  r.branch.empty() ? "" : ", branch " + Escape(r.branch),
                  r.since ? ", since " + Escape(*r.since) : "", "; generated ",
                  Escape(r.generated_at), ".</p>\n");

  html += "<h2>Headline</h2>\n";
  if (r.headline.empty()) {
    html += "<p>No candidate landed in this period.</p>\n";
  } else {
    html += "<div class=\"cards\">\n";
    for (const HeadlineRow& h : r.headline) {
      absl::StrAppendFormat(
          &html,
          "<div class=\"card\"><div class=\"sub\">%s</div><div class=\"value\">%.2fx</div>"
          "<div class=\"sub\">bracket [%.2f, %.2f] over %d landed</div></div>\n",
          Escape(h.metric), h.cumulative, h.low, h.high, h.merges);
    }
    html += "</div>\n";
  }

  html += "<h2>Timeline of landed commits</h2>\n";
  if (r.timeline.empty()) html += "<p>Nothing landed.</p>\n";
  for (const auto& [metric, steps] : r.timeline) {
    absl::StrAppend(&html, "<h3>", Escape(metric), "</h3>\n", Chart(metric, steps));
  }

  if (!r.awaiting_approval.empty()) {
    html += "<h2>Awaiting approval</h2>\n<p>Accepted, and held by their branch's policy for a "
            "person: <code>densegate approve ID</code> or <code>densegate decline ID --reason "
            "TEXT</code>.</p>\n";
    html += Table(kCandidateHeaders, Rows(r.awaiting_approval, CandidateCells),
                  CandidateFeedbackLinks(r.awaiting_approval, r.feedback_link_prefix));
  }
  html += "<h2>Candidates</h2>\n";
  html += r.candidates.empty() ? "<p>No evaluation finished in this period.</p>\n"
                               : Table(kCandidateHeaders, Rows(r.candidates, CandidateCells),
                                       CandidateFeedbackLinks(r.candidates,
                                                              r.feedback_link_prefix));

  html += "<h2>Rejected, by reason</h2>\n";
  if (r.rejected.empty()) html += "<p>Nothing was rejected.</p>\n";
  for (const auto& [code, list] : r.rejected) {
    absl::StrAppendFormat(&html, "<h3>%s (%d)</h3>\n<ul>\n", Escape(code), list.size());
    for (const CandidateRow& c : list) {
      absl::StrAppend(&html, "<li><code>", Escape(c.commit), "</code> by ", Escape(c.submitter),
                      ": ", Escape(c.reason ? c.reason->message : ""), "</li>\n");
    }
    html += "</ul>\n";
  }

  html += "<h2>Precision: error against fp64 by context length</h2>\n";
  if (r.precision.empty()) {
    html += "<p>No evaluation in this period ran a precision suite.</p>\n";
  }
  for (const PrecisionChart& p : r.precision) {
    absl::StrAppendFormat(&html, "<h3>%s: %s (%s, %s)</h3>\n", Escape(p.suite), Escape(p.commit),
                          Escape(p.evaluation), Escape(p.decision));
    html += PrecisionSvg(p);
  }

  html += "<h2>Bisections</h2>\n";
  if (r.bisections.empty()) html += "<p>No bisection in this period.</p>\n";
  for (const Bisection& b : r.bisections) {
    absl::StrAppendFormat(&html, "<h3>%s over %s (%d commits): culprit %s</h3>\n",
                          Escape(b.metric), Escape(b.range), b.commits,
                          b.culprit ? "<code>" + Escape(b.culprit->commit) + "</code>"
                                    : "not found yet");
    html += Table(kBisectHeaders, Rows(b.steps, BisectCells));
  }

  html += "<h2>Campaigns: claimed against confirmed</h2>\n";
  if (r.campaigns.empty()) {
    html += "<p>No campaign's experiment was accepted toward a branch in this period.</p>\n";
  }
  for (const CampaignRow& c : r.campaigns) {
    absl::StrAppendFormat(&html, "<h3>%s: %d landed</h3>\n", Escape(c.campaign), c.landed);
    html += Table(kCampaignHeaders, Rows(c.experiments, CampaignCells));
  }

  html += "<h2>Change points</h2>\n";
  html += r.change_points.empty()
              ? absl::StrCat("<p>", kNoChangePoints, "</p>\n")
              : Table(kChangePointHeaders, Rows(r.change_points, ChangePointCells));

  html += "<h2>Nodes</h2>\n";
  html += r.nodes.empty() ? "<p>No node registered.</p>\n"
                          : Table(kNodeHeaders, Rows(r.nodes, NodeCells));
  html += "</body></html>\n";
  return html;
}

}  // namespace densegate::results
