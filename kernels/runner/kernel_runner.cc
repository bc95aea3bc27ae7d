// The workload's kernel runner: serves the harness's requests on stdin /
// stdout, one JSON object per line, with the data in the shared memory the
// harness passes as file descriptor 3. Protocol: harness/runner/README.md.
//
//   {"cmd":"describe","op":..,"shape":{..},"params":{..}}
//     -> {"ok":true,"buffers":[{"name","role","count","init"}..]}
//   {"cmd":"run","op":..,"shape":..,"params":..,"mode":"compute"|"reference"}
//     -> {"ok":true} after the op ran on the shared memory
//   any failure -> {"ok":false,"error":"..."}; EOF on stdin -> exit 0.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/runner/runner_ops.h"
#include "nlohmann/json.hpp"

namespace {

using densegate::kernels::runner::BufferSpec;
using densegate::kernels::runner::Role;
using nlohmann::json;

constexpr int kSharedMemoryFd = 3;

int64_t Align64(int64_t x) { return (x + 63) / 64 * 64; }

const char* RoleName(Role r) {
  switch (r) {
    case Role::kInput:
      return "input";
    case Role::kInOut:
      return "inout";
    case Role::kOutput:
      return "output";
  }
  return "input";
}

json Error(const std::string& message) { return {{"ok", false}, {"error", message}}; }

// Maps the shared memory afresh for each call: the harness may have grown it.
class SharedMemory {
 public:
  ~SharedMemory() { Unmap(); }
  bool Map(int64_t need, std::string* error) {
    struct stat st;
    if (fstat(kSharedMemoryFd, &st) != 0) {
      *error = "no shared memory on file descriptor 3";
      return false;
    }
    if (st.st_size < need) {
      *error = absl::StrFormat("shared memory holds %d bytes, the layout needs %d",
                               st.st_size, need);
      return false;
    }
    if (st.st_size != size_) {
      Unmap();
      void* p = mmap(nullptr, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                     kSharedMemoryFd, 0);
      if (p == MAP_FAILED) {
        *error = "cannot map the shared memory";
        return false;
      }
      base_ = static_cast<char*>(p);
      size_ = st.st_size;
    }
    return true;
  }
  char* base() const { return base_; }

 private:
  void Unmap() {
    if (base_ != nullptr) munmap(base_, size_);
    base_ = nullptr;
    size_ = 0;
  }
  char* base_ = nullptr;
  int64_t size_ = 0;
};

json Handle(const json& request, SharedMemory* shm) {
  if (!request.is_object() || !request.contains("cmd") || !request.contains("op")) {
    return Error("a request needs \"cmd\" and \"op\"");
  }
  const std::string cmd = request.value("cmd", "");
  const std::string op = request.value("op", "");
  const json shape = request.value("shape", json::object());
  const json params = request.value("params", json::object());
  auto specs = densegate::kernels::runner::DescribeOp(op, shape, params);
  if (!specs.ok()) return Error(std::string(specs.status().message()));
  if (cmd == "describe") {
    json buffers = json::array();
    for (const BufferSpec& b : *specs) {
      buffers.push_back(
          {{"name", b.name}, {"role", RoleName(b.role)}, {"count", b.count}, {"init", b.init}});
    }
    return {{"ok", true}, {"buffers", buffers}};
  }
  if (cmd != "run") return Error("unknown cmd \"" + cmd + "\": expected describe or run");
  const std::string mode = request.value("mode", "compute");
  if (mode != "compute" && mode != "reference") {
    return Error("mode must be compute or reference, got \"" + mode + "\"");
  }
  const bool reference = mode == "reference";
  // The layout (see the protocol): fp32 buffers in order, each 64-byte
  // aligned; in reference mode fp64 results for in-out and output buffers
  // after them.
  std::vector<int64_t> offsets, result_offsets;
  int64_t end = 0;
  for (const BufferSpec& b : *specs) {
    offsets.push_back(end);
    end = Align64(end + b.count * 4);
  }
  if (reference) {
    for (const BufferSpec& b : *specs) {
      if (b.role == Role::kInput) continue;
      result_offsets.push_back(end);
      end = Align64(end + b.count * 8);
    }
  }
  std::string error;
  if (!shm->Map(end, &error)) return Error(error);
  std::vector<float*> buffers;
  std::vector<double*> results;
  for (int64_t o : offsets) buffers.push_back(reinterpret_cast<float*>(shm->base() + o));
  for (int64_t o : result_offsets) results.push_back(reinterpret_cast<double*>(shm->base() + o));
  absl::Status st =
      densegate::kernels::runner::RunOp(op, shape, params, reference, buffers, results);
  if (!st.ok()) return Error(std::string(st.message()));
  return {{"ok", true}};
}

}  // namespace

int main() {
  SharedMemory shm;
  std::string line;
  while (std::getline(std::cin, line)) {
    json reply;
    json request = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (request.is_discarded()) {
      reply = Error("request is not valid JSON");
    } else {
      reply = Handle(request, &shm);
    }
    std::cout << reply.dump() << "\n" << std::flush;
  }
  return 0;
}
