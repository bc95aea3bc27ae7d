// Runs the serving benchmark in-process: submits a dataset to a fresh
// Engine at its arrival times, waits for every request, and reports the
// serving metrics, peak cache memory, per-stage counters and the
// configuration as JSON. RunComparison runs the pairs the runtime's goals
// are stated in (EPD vs colocated, batch 1 vs N, KV formats) and adds
// their ratios.
//
// Thread-compatible: one run at a time per caller.
#ifndef DENSEGATE_RUNTIME_BENCH_RUNNER_H_
#define DENSEGATE_RUNTIME_BENCH_RUNNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/bench_dataset.h"
#include "runtime/bench_flags.h"
#include "runtime/bench_metrics.h"
#include "runtime/engine.h"
#include "runtime/hybrid_model.h"

namespace densegate::runtime {

struct BenchRun {
  ServingMetrics metrics;
  MemoryReport memory;
  nlohmann::json json;  // Everything, including the above.
};

// One run with `engine` options (clock, tracer and logger included).
absl::StatusOr<BenchRun> RunServeBench(
    const HybridModel& model, const EngineOptions& engine,
    const std::vector<BenchRequest>& dataset);

// The runs `flags.compare` asks for, each with flags.engine changed as the
// comparison needs, and their ratios:
//   modes       EPD vs colocated with colocated_workers = prefill_workers +
//               decode_workers (encode and transfer threads are not
//               counted: their busy time is in the stage counters) and
//               equal decode slots: the decode pool's batches together hold
//               as many sequences as the colocated workers' batches
//               (max_batch_size each; rounded up when the decode workers
//               do not divide them);
//   batch       max_batch_size 1 vs flags' max_batch_size;
//   (modes and batch run flags.rounds times, alternating the order; the
//   ratio and the runs reported are the median round's, with every
//   round's ratio beside them in "..._rounds")
//   kv_formats  every KV format: peak attention-KV memory and bytes per
//               token against fp32 and bf16.
absl::StatusOr<nlohmann::json> RunComparison(
    const HybridModel& model, const BenchFlags& flags,
    const std::vector<BenchRequest>& dataset);

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_BENCH_RUNNER_H_
