// RunnerClient: the harness's side of the kernel runner protocol (see
// README.md in this directory). One client owns one runner process and the
// shared memory it computes on; nothing else of the harness is visible to
// that process. The harness fills the inputs, poisons the outputs, times
// each call on its own clock and reads the results back.
//
// Thread-compatible: one thread drives a client.
#ifndef DENSEGATE_HARNESS_RUNNER_RUNNER_CLIENT_H_
#define DENSEGATE_HARNESS_RUNNER_RUNNER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "platform/process/launcher.h"
#include "nlohmann/json.hpp"

namespace densegate::harness {

enum class BufferRole { kInput, kInOut, kOutput };

struct RunnerBuffer {
  std::string name;
  BufferRole role = BufferRole::kInput;
  int64_t count = 0;  // fp32 elements.
  nlohmann::json init;
  int64_t offset = 0;         // Bytes into the shared memory.
  int64_t result_offset = -1;  // Reference mode: its fp64 result.
};

// One op at one shape, as described by the (baseline-built) runner.
struct RunnerLayout {
  std::string op;
  nlohmann::json shape;
  nlohmann::json params;
  std::vector<RunnerBuffer> buffers;
  int64_t compute_bytes = 0;    // fp32 buffers.
  int64_t reference_bytes = 0;  // Plus the fp64 results.
};

// Builds the layout from a describe reply (validating it).
absl::StatusOr<RunnerLayout> LayoutFromDescription(const std::string& op,
                                                   const nlohmann::json& shape,
                                                   const nlohmann::json& params,
                                                   const nlohmann::json& reply);

class RunnerClient {
 public:
  // Starts `binary` (absolute, or relative to `dir`) in `dir` through
  // `launcher`, in `confinement`'s sandbox when set. `log_path` receives its
  // stderr.
  static absl::StatusOr<std::unique_ptr<RunnerClient>> Start(
      platform::ProcessLauncher* launcher, const std::string& dir, const std::string& binary,
      const std::string& log_path, const std::vector<int>& cpus,
      absl::Duration timeout, const std::optional<platform::Confinement>& confinement);
  ~RunnerClient();

  absl::StatusOr<RunnerLayout> Describe(const std::string& op, const nlohmann::json& shape,
                                        const nlohmann::json& params);

  // Sizes the shared memory for `layout` (reference: room for the results).
  absl::Status Prepare(const RunnerLayout& layout, bool reference);
  float* Buffer(const RunnerBuffer& b) { return reinterpret_cast<float*>(base_ + b.offset); }
  double* Result(const RunnerBuffer& b) {
    return reinterpret_cast<double*>(base_ + b.result_offset);
  }

  // One call; returns its wall time on the harness's clock (request written
  // to reply read). A runner error reply is FailedPrecondition with its
  // message; a crash, hang (past the call timeout) or garbage is Aborted.
  absl::StatusOr<double> Run(const RunnerLayout& layout, bool reference,
                             absl::Duration timeout);

  // CPU seconds the runner process has used so far (all threads).
  absl::StatusOr<double> CpuSeconds() const { return process_->CpuSeconds(); }
  // Closes stdin and reaps it.
  platform::ProcessResult Finish();

 private:
  RunnerClient() = default;
  absl::StatusOr<nlohmann::json> Call(const nlohmann::json& request, absl::Duration timeout);

  std::unique_ptr<platform::RunningProcess> process_;
  int memfd_ = -1;
  char* base_ = nullptr;
  int64_t size_ = 0;
  std::string pending_;  // Bytes read past the last reply.
  std::string log_path_;
};

}  // namespace densegate::harness

#endif  // DENSEGATE_HARNESS_RUNNER_RUNNER_CLIENT_H_
