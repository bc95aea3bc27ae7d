#include "runtime/bench_metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace densegate::runtime {
namespace {

constexpr size_t kMaxErrors = 5;

LatencySummary Summarize(const std::vector<double>& ms) {
  LatencySummary s;
  if (ms.empty()) return s;
  s.mean_ms = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  s.median_ms = Percentile(ms, 50);
  s.p99_ms = Percentile(ms, 99);
  return s;
}

void Put(const char* name, const LatencySummary& s, nlohmann::json* j) {
  (*j)[std::string("mean_") + name + "_ms"] = s.mean_ms;
  (*j)[std::string("median_") + name + "_ms"] = s.median_ms;
  (*j)[std::string("p99_") + name + "_ms"] = s.p99_ms;
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * (values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - lo);
}

ServingMetrics ComputeServingMetrics(const std::vector<RequestResult>& results,
                                     int64_t start_ns, int64_t end_ns) {
  ServingMetrics m;
  std::vector<double> ttft, tpot, itl, e2e;
  for (const RequestResult& r : results) {
    if (!r.status.ok() || r.tokens.empty()) {
      ++m.failed;
      if (m.errors.size() < kMaxErrors) m.errors.push_back(r.status.ToString());
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.tokens.size();
    const double first_ms = (r.token_times_ns.front() - r.arrival_ns) / 1e6;
    const double latency_ms = (r.token_times_ns.back() - r.arrival_ns) / 1e6;
    ttft.push_back(first_ms);
    e2e.push_back(latency_ms);
    if (r.tokens.size() > 1) {
      tpot.push_back((latency_ms - first_ms) / (r.tokens.size() - 1));
    }
    for (size_t i = 1; i < r.token_times_ns.size(); ++i) {
      itl.push_back((r.token_times_ns[i] - r.token_times_ns[i - 1]) / 1e6);
    }
  }
  m.duration_s = (end_ns - start_ns) / 1e9;
  if (m.duration_s > 0) {
    m.request_throughput = m.completed / m.duration_s;
    m.input_throughput = m.total_input_tokens / m.duration_s;
    m.output_throughput = m.total_output_tokens / m.duration_s;
    m.total_token_throughput =
        (m.total_input_tokens + m.total_output_tokens) / m.duration_s;
  }
  m.ttft = Summarize(ttft);
  m.tpot = Summarize(tpot);
  m.itl = Summarize(itl);
  m.e2e_latency = Summarize(e2e);
  return m;
}

nlohmann::json ServingMetricsToJson(const ServingMetrics& m) {
  nlohmann::json j;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["duration_s"] = m.duration_s;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["input_throughput"] = m.input_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  Put("ttft", m.ttft, &j);
  Put("tpot", m.tpot, &j);
  Put("itl", m.itl, &j);
  Put("e2e_latency", m.e2e_latency, &j);
  j["errors"] = m.errors;
  return j;
}

}  // namespace densegate::runtime
