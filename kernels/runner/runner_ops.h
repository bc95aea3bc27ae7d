// The ops the kernel runner implements, independent of the wire protocol:
// for an op and a shape, the buffers it reads and writes (with how the
// harness should fill the inputs), and how to run it in the two modes the
// harness asks for:
//   * compute: the workload's fp32 kernel as the workload ships it (what a
//     candidate changes and what is timed);
//   * reference: what the baseline holds to be the exact answer (the fp64
//     references for KDA, the portable scalar path for the quantizers),
//     written as fp64 results.
// Protocol and layout: harness/runner/README.md.
//
// Pure functions over caller-owned buffers; thread-compatible.
#ifndef DENSEGATE_KERNELS_RUNNER_RUNNER_OPS_H_
#define DENSEGATE_KERNELS_RUNNER_RUNNER_OPS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace densegate::kernels::runner {

enum class Role { kInput, kInOut, kOutput };

struct BufferSpec {
  std::string name;
  Role role = Role::kInput;
  int64_t count = 0;  // fp32 elements.
  // How the harness fills an input or in-out buffer, e.g.
  // {"dist": "normal", "scale": 1}. Null for outputs.
  nlohmann::json init;
};

// The buffers of `op` at `shape` (an object of integers) with `params` (an
// object of numbers), in layout order. InvalidArgument for an unknown op or
// a missing / out-of-range shape value, naming it.
absl::StatusOr<std::vector<BufferSpec>> DescribeOp(const std::string& op,
                                                    const nlohmann::json& shape,
                                                    const nlohmann::json& params);

// Runs `op`. `buffers` holds one fp32 array per BufferSpec, in order. In
// compute mode in-out buffers are updated and outputs written in place; in
// reference mode they are left as they are and `results` (one fp64 array per
// in-out or output buffer, in order) receives the answer.
absl::Status RunOp(const std::string& op, const nlohmann::json& shape,
                   const nlohmann::json& params, bool reference,
                   const std::vector<float*>& buffers,
                   const std::vector<double*>& results);

}  // namespace densegate::kernels::runner

#endif  // DENSEGATE_KERNELS_RUNNER_RUNNER_OPS_H_
