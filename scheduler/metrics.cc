// GET /metrics: the scheduler's counters in Prometheus text format.
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "scheduler/internal/rpc_util.h"
#include "scheduler/scheduler.h"

namespace densegate::scheduler {

void Scheduler::RecordClaim(double seconds, size_t leases) {
  ++claims_;
  dispatches_ += leases;
  claim_latency_us_sum_ += static_cast<int64_t>(seconds * 1e6);
  size_t b = 0;
  while (b < std::size(kLatencyBuckets) && seconds > kLatencyBuckets[b]) ++b;
  ++claim_latency_buckets_[b];
}

std::string Scheduler::RenderMetrics() {
  std::string out;
  auto line = [&](const std::string& text) { absl::StrAppend(&out, text, "\n"); };
  line("# HELP densegate_jobs Jobs in the store by state.");
  line("# TYPE densegate_jobs gauge");
  if (absl::StatusOr<results::QueueCounts> c = store_->CountJobs(); c.ok()) {
    line(absl::StrCat("densegate_jobs{state=\"queued\"} ", c->queued));
    line(absl::StrCat("densegate_jobs{state=\"leased\"} ", c->leased));
    line(absl::StrCat("densegate_jobs{state=\"done\"} ", c->done));
    line(absl::StrCat("densegate_jobs{state=\"cancelled\"} ", c->cancelled));
    line(absl::StrCat("densegate_jobs{state=\"dead\"} ", c->dead));
    line("# HELP densegate_queue_depth Queued jobs by class (claim order: calibration, ci, "
         "experiment), priority within the class, and required accelerator kind.");
    line("# TYPE densegate_queue_depth gauge");
    for (const results::QueueCounts::Group& g : c->queued_by_group) {
      line(absl::StrFormat(
          "densegate_queue_depth{class=\"%s\",priority=\"%d\",accelerator_kind=\"%s\"} %d",
          g.job_class, g.priority, g.accelerator_kind.empty() ? "any" : g.accelerator_kind,
          g.count));
    }
  }
  line("# HELP densegate_queued_evaluations Queued evaluations by kind (counted up to 1000).");
  line("# TYPE densegate_queued_evaluations gauge");
  for (v1::CandidateKind kind : {v1::CI, v1::EXPERIMENT}) {
    v1::ListEvaluationsRequest q;
    q.add_states(v1::QUEUED);
    q.set_kind(kind);
    q.set_page_size(1000);
    absl::StatusOr<v1::ListEvaluationsResponse> r = store_->ListEvaluations(q);
    if (r.ok()) {
      line(absl::StrCat("densegate_queued_evaluations{kind=\"",
                        absl::AsciiStrToLower(v1::CandidateKind_Name(kind)), "\"} ",
                        r->evaluations_size()));
    }
  }
  line("# HELP densegate_nodes Registered nodes by state.");
  line("# TYPE densegate_nodes gauge");
  if (absl::StatusOr<std::vector<v1::Node>> nodes = store_->ListNodes({}); nodes.ok()) {
    std::map<std::string, int> by_state;
    for (v1::NodeState st : {v1::CALIBRATING, v1::ACTIVE, v1::QUARANTINED, v1::DRAINING,
                             v1::OFFLINE, v1::DISTRUSTED}) {
      by_state[absl::AsciiStrToLower(v1::NodeState_Name(st))] = 0;
    }
    for (const v1::Node& n : *nodes) ++by_state[absl::AsciiStrToLower(v1::NodeState_Name(n.state()))];
    for (const auto& [st, n] : by_state) {
      line(absl::StrCat("densegate_nodes{state=\"", st, "\"} ", n));
    }
  }
  line("# HELP densegate_dispatches_total Leases handed to nodes since start.");
  line("# TYPE densegate_dispatches_total counter");
  line(absl::StrCat("densegate_dispatches_total ", dispatches_.load()));
  line("# HELP densegate_lease_expiries_total Leases expired (heartbeats stopped) since start.");
  line("# TYPE densegate_lease_expiries_total counter");
  line(absl::StrCat("densegate_lease_expiries_total ", lease_expiries_.load()));
  line("# HELP densegate_calibrations_total A/A calibrations finished since start.");
  line("# TYPE densegate_calibrations_total counter");
  line(absl::StrCat("densegate_calibrations_total ", calibrations_.load()));
  line("# HELP densegate_verdicts_total Verdicts written since start, by decision.");
  line("# TYPE densegate_verdicts_total counter");
  for (v1::Decision d : {v1::ACCEPT, v1::REJECT, v1::INCONCLUSIVE}) {
    line(absl::StrCat("densegate_verdicts_total{decision=\"",
                      absl::AsciiStrToLower(v1::Decision_Name(d)), "\"} ", verdicts_[d].load()));
  }
  line(
      "# HELP densegate_claim_latency_seconds Store claim latency, including the "
      "wait for a turn (--max_concurrent_claims) and, for a claim that goes with a "
      "verdict, writing the verdict.");
  line("# TYPE densegate_claim_latency_seconds histogram");
  int64_t cumulative = 0;
  for (size_t b = 0; b <= std::size(kLatencyBuckets); ++b) {
    cumulative += claim_latency_buckets_[b].load();
    std::string le = b < std::size(kLatencyBuckets) ? absl::StrCat(kLatencyBuckets[b]) : "+Inf";
    line(absl::StrCat("densegate_claim_latency_seconds_bucket{le=\"", le, "\"} ", cumulative));
  }
  line(absl::StrCat("densegate_claim_latency_seconds_sum ", claim_latency_us_sum_.load() / 1e6));
  line(absl::StrCat("densegate_claim_latency_seconds_count ", claims_.load()));
  const results::FinishBatchCounts batches = store_->finish_batch_counts();
  line(
      "# HELP densegate_finish_statements_total PostgreSQL: statements that finished leases "
      "and claimed the nodes' next jobs, each serving the nodes that waited for a claim turn "
      "together.");
  line("# TYPE densegate_finish_statements_total counter");
  line(absl::StrCat("densegate_finish_statements_total ", batches.statements));
  line(
      "# HELP densegate_finish_statement_leases_total PostgreSQL: leases those statements "
      "finished (divided by the statements: nodes served per statement).");
  line("# TYPE densegate_finish_statement_leases_total counter");
  line(absl::StrCat("densegate_finish_statement_leases_total ", batches.leases));
  return out;
}

}  // namespace densegate::scheduler
