// What both renderers of the report print from its model (model.h):
// the headline metric of a verdict and the cells of each table. Internal to
// results/report.
#ifndef DENSEGATE_RESULTS_REPORT_INTERNAL_CELLS_H_
#define DENSEGATE_RESULTS_REPORT_INTERNAL_CELLS_H_

#include <string>
#include <vector>

#include "proto/densegate.pb.h"
#include "results/report/model.h"

namespace densegate::results::internal {

// The metric a candidate is judged by: its first measured primary metric,
// else its first primary one, else its first metric; null when the verdict
// has none.
const v1::MetricComparison* Headline(const v1::Verdict& v);

std::vector<std::string> CandidateCells(const CandidateRow& c);
// What shows a candidate's feedback: "densegate feedback EVALUATION".
std::string FeedbackCommand(const CandidateRow& c);
std::vector<std::string> ChangePointCells(const ChangePointRow& p);
std::vector<std::string> NodeCells(const NodeRow& n);
std::vector<std::string> BisectCells(const BisectStep& s);

extern const std::vector<std::string> kCandidateHeaders;
extern const std::vector<std::string> kChangePointHeaders;
extern const std::vector<std::string> kNodeHeaders;
extern const std::vector<std::string> kBisectHeaders;
std::vector<std::string> CampaignCells(const CampaignExperimentRow& x);
extern const std::vector<std::string> kCampaignHeaders;
extern const char kNoChangePoints[];

// The rows `cells` makes of `items`.
template <typename T, typename F>
std::vector<std::vector<std::string>> Rows(const std::vector<T>& items, F cells) {
  std::vector<std::vector<std::string>> rows;
  for (const T& item : items) rows.push_back(cells(item));
  return rows;
}

}  // namespace densegate::results::internal

#endif  // DENSEGATE_RESULTS_REPORT_INTERNAL_CELLS_H_
