// Fresh inputs for kernel runner calls, drawn by the harness from a seed the
// runner never sees. The distribution of each buffer comes from the
// baseline-built runner's description ("init"); the harness implements them:
//   {"dist":"normal","scale":s}       s * N(0, 1)
//   {"dist":"uniform","lo":a,"hi":b}  U(a, b)
//   {"dist":"log_decay","gate_scale":s}  logsigmoid(N(0, 1)) / s  (<= 0)
//   {"dist":"sigmoid_normal"}         sigmoid(N(0, 1))
// Never zeros: every value is drawn.
//
// Thread-safe (pure functions); HiddenSeed() reads the OS entropy source.
#ifndef DENSEGATE_HARNESS_RUNNER_INPUTS_H_
#define DENSEGATE_HARNESS_RUNNER_INPUTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "harness/runner/runner_client.h"

namespace densegate::harness {

// Draws values for every input and in-out buffer of `layout` (outputs get
// an empty vector), in layout order. InvalidArgument for an unknown init.
absl::Status DrawInputs(const RunnerLayout& layout, uint64_t seed,
                        std::vector<std::vector<float>>* values);

// A seed from the OS entropy source mixed with `salt`: different on every
// call, unknowable to the runner.
uint64_t HiddenSeed(uint64_t salt);

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_RUNNER_INPUTS_H_
