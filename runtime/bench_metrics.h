// Serving metrics as SGLang's / vLLM's bench_serving define them, from the
// per-request results of one run:
//   TTFT  first token time - arrival
//   TPOT  (latency - TTFT) / (output_len - 1), per request with > 1 token
//   ITL   gaps between consecutive tokens, pooled over all requests
//   throughputs: completed requests, input / output / total tokens over the
//   run's duration (first arrival to last finish).
// Each latency is summarized by mean, median and p99 (numpy's linear
// interpolation), in milliseconds.
//
// Pure functions; thread-compatible.
#ifndef DENSEGATE_RUNTIME_BENCH_METRICS_H_
#define DENSEGATE_RUNTIME_BENCH_METRICS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "runtime/request.h"

namespace densegate::runtime {

struct LatencySummary {
  double mean_ms = 0;
  double median_ms = 0;
  double p99_ms = 0;
};

struct ServingMetrics {
  int completed = 0;
  int failed = 0;
  double duration_s = 0;
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;  // Per second.
  double input_throughput = 0;
  double output_throughput = 0;
  double total_token_throughput = 0;
  LatencySummary ttft, tpot, itl, e2e_latency;
  std::vector<std::string> errors;  // The first few failures' messages.
};

// The p-th percentile (0..100) with linear interpolation, as numpy's
// default; 0 for an empty input.
double Percentile(std::vector<double> values, double p);

// Failed requests count in `failed` only; the throughputs and latencies
// cover completed ones. `start_ns` is when the run began.
ServingMetrics ComputeServingMetrics(const std::vector<RequestResult>& results,
                                     int64_t start_ns, int64_t end_ns);

// bench_serving's key names (mean_ttft_ms, p99_itl_ms, output_throughput...).
nlohmann::json ServingMetricsToJson(const ServingMetrics& m);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_BENCH_METRICS_H_
