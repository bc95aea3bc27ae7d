#include "harness/runner/runner_client.h"

#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace densegate::harness {
namespace {

constexpr int kSharedMemoryFd = 3;

int64_t Align64(int64_t x) { return (x + 63) / 64 * 64; }

}  // namespace

absl::StatusOr<RunnerLayout> LayoutFromDescription(const std::string& op,
                                                   const nlohmann::json& shape,
                                                   const nlohmann::json& params,
                                                   const nlohmann::json& reply) {
  RunnerLayout layout;
  layout.op = op;
  layout.shape = shape;
  layout.params = params;
  if (!reply.contains("buffers") || !reply["buffers"].is_array()) {
    return absl::InvalidArgumentError("describe reply has no \"buffers\" array");
  }
  int64_t end = 0;
  for (const nlohmann::json& b : reply["buffers"]) {
    RunnerBuffer buffer;
    buffer.name = b.value("name", "");
    std::string role = b.value("role", "");
    if (role == "input") {
      buffer.role = BufferRole::kInput;
    } else if (role == "inout") {
      buffer.role = BufferRole::kInOut;
    } else if (role == "output") {
      buffer.role = BufferRole::kOutput;
    } else {
      return absl::InvalidArgumentError("buffer " + buffer.name + " has role \"" + role + "\"");
    }
    if (!b.contains("count") || !b["count"].is_number_integer() || b["count"].get<int64_t>() < 1) {
      return absl::InvalidArgumentError("buffer " + buffer.name + " has no positive count");
    }
    buffer.count = b["count"].get<int64_t>();
    buffer.init = b.value("init", nlohmann::json());
    buffer.offset = end;
    end = Align64(end + buffer.count * 4);
    layout.buffers.push_back(std::move(buffer));
  }
  layout.compute_bytes = end;
  for (RunnerBuffer& b : layout.buffers) {
    if (b.role == BufferRole::kInput) continue;
    b.result_offset = end;
    end = Align64(end + b.count * 8);
  }
  layout.reference_bytes = end;
  bool has_result = false;
  for (const RunnerBuffer& b : layout.buffers) has_result |= b.role != BufferRole::kInput;
  if (!has_result) return absl::InvalidArgumentError("op " + op + " declares no outputs");
  return layout;
}

absl::StatusOr<std::unique_ptr<RunnerClient>> RunnerClient::Start(
    platform::ProcessLauncher* launcher, const std::string& dir, const std::string& binary,
    const std::string& log_path, const std::vector<int>& cpus, absl::Duration timeout,
    const std::optional<platform::Confinement>& confinement) {
  std::unique_ptr<RunnerClient> c(new RunnerClient);
  c->memfd_ = memfd_create("densegate-runner", MFD_CLOEXEC);
  if (c->memfd_ < 0) return absl::InternalError("memfd_create failed");
  platform::ProcessSpec spec;
  spec.argv = {binary.empty() || binary[0] == '/' ? binary : dir + "/" + binary};
  spec.working_dir = dir;
  spec.stderr_path = log_path;
  spec.wall_timeout = timeout;
  spec.cpus = cpus;
  spec.inherit_fds = {{kSharedMemoryFd, c->memfd_}};
  spec.confinement = confinement;
  c->log_path_ = log_path;
  absl::StatusOr<std::unique_ptr<platform::RunningProcess>> p = launcher->Start(spec);
  if (!p.ok()) return p.status();
  c->process_ = std::move(*p);
  return c;
}

RunnerClient::~RunnerClient() {
  if (process_) process_->Finish(absl::Seconds(1));
  if (base_ != nullptr) munmap(base_, size_);
  if (memfd_ >= 0) close(memfd_);
}

platform::ProcessResult RunnerClient::Finish() {
  platform::ProcessResult r = process_->Finish(absl::Seconds(2));
  return r;
}

absl::StatusOr<nlohmann::json> RunnerClient::Call(const nlohmann::json& request,
                                                  absl::Duration timeout) {
  if (!platform::WriteAll(process_->stdin_fd(), request.dump() + "\n")) {
    return absl::AbortedError("the runner is gone (its stdin is closed); stderr: " + log_path_);
  }
  const absl::Time deadline = absl::Now() + timeout;
  size_t nl;
  while ((nl = pending_.find('\n')) == std::string::npos) {
    int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) {
      return absl::AbortedError(absl::StrFormat(
          "the runner did not answer within %s (hung); stderr: %s",
          absl::FormatDuration(timeout), log_path_));
    }
    pollfd p{process_->stdout_fd(), POLLIN, 0};
    int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left_ms, 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char buf[4096];
    ssize_t n = read(process_->stdout_fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      platform::ProcessResult result = process_->Finish(absl::ZeroDuration());
      return absl::AbortedError("the runner exited mid-call (" + result.Describe() +
                                "); stderr: " + log_path_);
    }
    pending_.append(buf, static_cast<size_t>(n));
    if (pending_.size() > (1 << 20)) return absl::AbortedError("the runner's reply is too long");
  }
  std::string line = pending_.substr(0, nl);
  pending_.erase(0, nl + 1);
  nlohmann::json reply = nlohmann::json::parse(line, nullptr, false);
  if (reply.is_discarded() || !reply.is_object() || !reply.contains("ok")) {
    return absl::AbortedError("the runner answered something that is not a protocol reply: " +
                              line.substr(0, 200));
  }
  if (!reply.value("ok", false)) {
    return absl::FailedPreconditionError(reply.value("error", std::string("runner error")));
  }
  return reply;
}

absl::StatusOr<RunnerLayout> RunnerClient::Describe(const std::string& op,
                                                    const nlohmann::json& shape,
                                                    const nlohmann::json& params) {
  absl::StatusOr<nlohmann::json> reply =
      Call({{"cmd", "describe"}, {"op", op}, {"shape", shape}, {"params", params}},
           absl::Seconds(30));
  if (!reply.ok()) return reply.status();
  return LayoutFromDescription(op, shape, params, *reply);
}

absl::Status RunnerClient::Prepare(const RunnerLayout& layout, bool reference) {
  const int64_t need = reference ? layout.reference_bytes : layout.compute_bytes;
  if (need == size_) return absl::OkStatus();
  if (base_ != nullptr) munmap(base_, size_);
  base_ = nullptr;
  if (ftruncate(memfd_, need) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("cannot size the shared memory to %d bytes", need));
  }
  void* p = mmap(nullptr, need, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
  if (p == MAP_FAILED) return absl::ResourceExhaustedError("cannot map the shared memory");
  base_ = static_cast<char*>(p);
  size_ = need;
  return absl::OkStatus();
}

absl::StatusOr<double> RunnerClient::Run(const RunnerLayout& layout, bool reference,
                                         absl::Duration timeout) {
  const absl::Time start = absl::Now();
  absl::StatusOr<nlohmann::json> reply =
      Call({{"cmd", "run"},
            {"op", layout.op},
            {"shape", layout.shape},
            {"params", layout.params},
            {"mode", reference ? "reference" : "compute"}},
           timeout);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!reply.ok()) return reply.status();
  return seconds;
}

}  // namespace densegate::harness
