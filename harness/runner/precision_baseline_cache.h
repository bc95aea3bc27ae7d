// PrecisionBaselineCache: the baseline's half of a precision sweep, kept
// between sweeps on one node. That half depends only on the baseline-built
// runner and the suite: the drawn inputs, the fp64 reference and the
// baseline's own errors. Candidates queued against one baseline (an agent's
// experiments, CI's commits against one tip) would each compute it again:
// about 6 of the 7 s a sweep of the demo's suite takes (runner/README.md).
// Entries are keyed by the runner's input digest (harness/identity) and the
// suite's op, lengths and parameters, and the least recently used ones are
// dropped beyond a byte budget.
//
// The inputs of a suite are then drawn once per baseline runner on a node
// rather than once per sweep. No runner sees them before it is given them,
// as before; one that kept them gains nothing, since the sweep is not timed
// and only an accurate computation matches the reference it never sees.
//
// Thread-safe.
#ifndef DENSEGATE_HARNESS_RUNNER_PRECISION_BASELINE_CACHE_H_
#define DENSEGATE_HARNESS_RUNNER_PRECISION_BASELINE_CACHE_H_

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "harness/runner/precision_suite.h"
#include "harness/runner/runner_client.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

struct PrecisionBaseline {
  RunnerLayout layout;
  // Per buffer of `layout`, in its order; empty for outputs.
  std::vector<std::vector<float>> inputs;
  // The reference's fp64 "out" buffer.
  std::vector<double> reference;
  // The baseline's fp32 errors against it.
  PrecisionCurve curve;

  int64_t Bytes() const;
};

// The cache key of `suite` run with a baseline runner whose
// BenchmarkInputsDigest is `runner_digest`.
std::string PrecisionBaselineKey(const std::string& runner_digest, const v1::PrecisionSuite& suite);

class PrecisionBaselineCache {
 public:
  // 0 keeps nothing.
  explicit PrecisionBaselineCache(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // Null when absent. A hit becomes the most recently used entry.
  std::shared_ptr<const PrecisionBaseline> Find(const std::string& key);
  // Replaces an entry under the same key; an entry larger than the whole
  // budget is not kept.
  void Insert(const std::string& key, std::shared_ptr<const PrecisionBaseline> baseline);

  int64_t bytes() const;
  int entries() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const PrecisionBaseline>>;
  void EraseLocked(std::list<Entry>::iterator it);

  const int64_t capacity_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // Most recently used first.
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> index_;
  int64_t bytes_ = 0;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_RUNNER_PRECISION_BASELINE_CACHE_H_
