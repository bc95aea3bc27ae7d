// CompareBenchmarkInputs: whether a benchmark reads byte-identical inputs in
// the baseline's and the candidate's checkouts. When it does, the two arms
// would run the same program on the same data on the same machine, so its
// metrics cannot have changed and the harness need not measure them
// (BenchmarkSpec.skip_when_identical). A comment-only change, or a runtime
// change under a kernel benchmark that does not link the runtime, is decided
// by construction instead of by 20 noisy pairs.
//
// The inputs: the executable (the command's first word, a path in the
// checkout), every file under its Bazel runfiles tree <executable>.runfiles
// (except the tree's MANIFEST, whose lines name each checkout's absolute
// paths) and every file under the manifest's `reads`. Symbolic links are
// followed: Bazel's output and runfiles trees are links into each
// checkout's own output base, so what counts is what they point at. The
// command line and the environment are the same in both arms by
// construction (one manifest, one launcher).
//
// BenchmarkInputsDigest: the same inputs of one checkout as a SHA-256
// digest, which outlives the checkout: the merge queue's re-measure of a
// candidate against a moved tip compares the digests of its two arms with
// those recorded by the evaluation it re-measures, and when both match it
// takes that evaluation's samples instead of measuring the same programs
// again (see harness/evaluator.h).
//
// Thread-safety: pure functions of the file trees; safe to call
// concurrently.
#ifndef DENSEGATE_HARNESS_IDENTITY_BENCHMARK_INPUTS_H_
#define DENSEGATE_HARNESS_IDENTITY_BENCHMARK_INPUTS_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/densegate.pb.h"

namespace densegate::harness {

struct InputComparison {
  bool identical = false;
  // When not identical: the first input found to differ, relative to the
  // checkout, and how (e.g. "bazel-bin/x/bench: contents differ").
  std::string difference;
  // Files and bytes compared (per arm) before the answer was known.
  int64_t files = 0;
  int64_t bytes = 0;
};

// FailedPrecondition when the executable is not a regular file in either
// checkout (not built), or a tree is too deep or too large to walk (a
// symbolic-link loop); the caller then measures the benchmark.
absl::StatusOr<InputComparison> CompareBenchmarkInputs(const v1::BenchmarkSpec& benchmark,
                                                       const std::string& baseline_dir,
                                                       const std::string& candidate_dir);

// Lowercase hex SHA-256 over the benchmark's manifest entry (command,
// metrics, reads...) and then each input of `benchmark` in `checkout_dir`,
// in path order: its path relative to the checkout, its size, its bytes.
// Two checkouts with equal digests for one entry are identical in
// CompareBenchmarkInputs's sense. Errors as CompareBenchmarkInputs's, and
// FailedPrecondition for a file that cannot be read to its end.
absl::StatusOr<std::string> BenchmarkInputsDigest(const v1::BenchmarkSpec& benchmark,
                                                  const std::string& checkout_dir);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_IDENTITY_BENCHMARK_INPUTS_H_
