// The serving benchmark's random dataset, as SGLang's and vLLM's
// bench_serving build theirs: each request has an input length drawn
// uniformly from [input_len * range_ratio, input_len] (at least 1) and an
// output length from [output_len * range_ratio, output_len], random token
// ids, and an arrival time: a Poisson process of `request_rate` requests
// per second, or all at time 0 when the rate is infinite.
//
// Pure functions; deterministic in the options (seed included).
#ifndef DENSEGATE_RUNTIME_BENCH_DATASET_H_
#define DENSEGATE_RUNTIME_BENCH_DATASET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/request.h"

namespace densegate::runtime {

struct DatasetOptions {
  int num_prompts = 64;
  int input_len = 256;
  int output_len = 128;
  double range_ratio = 1.0;  // In (0, 1]; 1 = fixed lengths.
  double request_rate = 0;   // Requests/s; <= 0 or inf = all at once.
  uint64_t seed = 0;
  int vocab_size = 0;
};

struct BenchRequest {
  Request request;       // arrival_ns unset: the runner stamps it.
  double arrival_s = 0;  // Offset from the start of the run.
};

// InvalidArgument naming the option for bad values.
absl::StatusOr<std::vector<BenchRequest>> MakeRandomDataset(
    const DatasetOptions& options);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_BENCH_DATASET_H_
