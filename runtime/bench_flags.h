// Command-line flags of //runtime:serve_bench, parsed into typed values
// with every choice checked up front: a bad flag or value is reported by
// name (the binary exits with code 2).
//
// Plain functions; thread-compatible.
#ifndef DENSEGATE_RUNTIME_BENCH_FLAGS_H_
#define DENSEGATE_RUNTIME_BENCH_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/bench_dataset.h"
#include "runtime/engine.h"
#include "runtime/hybrid_model.h"
#include "runtime/logger.h"

namespace densegate::runtime {

// Which pairs --compare runs in one invocation.
enum class CompareMode { kNone, kModes, kBatch, kKvFormats, kAll };

struct BenchFlags {
  bool help = false;
  std::string config = "runtime/configs/bench.json";
  EngineOptions engine;  // clock/tracer/logger are filled in by the runner.
  ModelOptions model;
  DatasetOptions dataset;  // vocab_size comes from the model config.
  std::string trace;       // Empty: no trace.
  LogLevel log_level = LogLevel::kWarning;
  CompareMode compare = CompareMode::kNone;
  // --compare modes and batch: how many times each pair runs, alternating
  // which side goes first, so a machine that drifts during the comparison
  // moves both sides alike; the reported ratio is the median over rounds.
  int rounds = 1;
};

// Parses argv[1..] ("--name=value" or "--name value"). InvalidArgument
// naming the flag for unknown flags, missing or malformed values, and
// values out of range.
absl::StatusOr<BenchFlags> ParseBenchFlags(
    const std::vector<std::string>& args);

// The --help text.
std::string BenchUsage();

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_BENCH_FLAGS_H_
