#include "kernels/cuda/kda_decode_cuda.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/cuda/kda_decode_cuda_entry.h"

namespace densegate::kernels::cuda {
namespace {

constexpr const char* kWhat = "KDA CUDA decode";

absl::Status CudaError(int code, const char* step) {
  if (code == kDgCudaNotBuilt) {
    return absl::UnimplementedError(absl::StrFormat(
        "%s: this binary was built without CUDA (the stub entry points are "
        "linked); build //kernels/cuda:kda_decode_cuda_gpu with nvcc (see "
        "kernels/cuda/README.md) to run the kernel",
        kWhat));
  }
  return absl::InternalError(absl::StrFormat("%s: %s failed: %s (error %d)",
                                             kWhat, step,
                                             DgCudaErrorString(code), code));
}

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) DgCudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  absl::Status Allocate(size_t bytes) {
    const int e = DgCudaMalloc(&ptr_, bytes);
    if (e != 0) {
      ptr_ = nullptr;
      return CudaError(e, "cudaMalloc");
    }
    return absl::OkStatus();
  }
  absl::Status Upload(const void* src, size_t bytes) {
    const int e = DgCudaMemcpyHostToDevice(ptr_, src, bytes);
    return e == 0 ? absl::OkStatus() : CudaError(e, "cudaMemcpy to device");
  }
  absl::Status Download(void* dst, size_t bytes) const {
    const int e = DgCudaMemcpyDeviceToHost(dst, ptr_, bytes);
    return e == 0 ? absl::OkStatus() : CudaError(e, "cudaMemcpy to host");
  }
  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

#define KDA_RETURN_IF_ERROR(expr)     \
  do {                               \
    const absl::Status _st = (expr); \
    if (!_st.ok()) return _st;       \
  } while (0)

}  // namespace

absl::Status KdaCudaStatus() {
  int count = 0;
  const int e = DgCudaDeviceCount(&count);
  if (e != 0) {
    if (e == kDgCudaNotBuilt) return CudaError(e, "cudaGetDeviceCount");
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: cudaGetDeviceCount failed: %s", kWhat, DgCudaErrorString(e)));
  }
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: no CUDA device found", kWhat));
  }
  return absl::OkStatus();
}

absl::Status KdaDecodeCudaDevice(const kda::KdaDims& dims,
                                 const kda::KdaInputs<float>& device_in,
                                 float* device_state, float* device_out,
                                 const kda::KdaMath& math) {
  KDA_RETURN_IF_ERROR(
      kda::ValidateKdaInputs(dims, device_in, math.gate_mode, kWhat));
  if (device_state == nullptr || device_out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: state and out must not be null", kWhat));
  }
  DgKdaDecodeParams p{};
  p.batch = dims.batch;
  p.heads = dims.heads;
  p.k_dim = dims.k_dim;
  p.v_dim = dims.v_dim;
  p.precision = static_cast<int>(math.precision);
  p.gate_from_raw = math.gate_mode == kda::KdaGateMode::kFromRaw ? 1 : 0;
  p.l2_eps = static_cast<float>(math.l2_eps);
  p.q = device_in.q;
  p.k = device_in.k;
  p.v = device_in.v;
  p.g = device_in.g;
  p.beta = device_in.beta;
  p.a_log = device_in.a_log;
  p.dt_bias = device_in.dt_bias;
  p.state = device_state;
  p.out = device_out;
  int e = DgKdaDecodeLaunch(&p);
  if (e != 0) return CudaError(e, "kernel launch");
  e = DgCudaDeviceSynchronize();
  if (e != 0) return CudaError(e, "kernel execution");
  return absl::OkStatus();
}

absl::Status KdaDecodeCudaHost(const kda::KdaDims& dims,
                               const kda::KdaInputs<float>& host_in,
                               float* host_state, float* host_out,
                               const kda::KdaMath& math) {
  KDA_RETURN_IF_ERROR(
      kda::ValidateKdaInputs(dims, host_in, math.gate_mode, kWhat));
  if (host_state == nullptr || host_out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: state and out must not be null", kWhat));
  }
  KDA_RETURN_IF_ERROR(KdaCudaStatus());
  const int64_t bh = static_cast<int64_t>(dims.batch) * dims.heads;
  const size_t f = sizeof(float);
  const size_t qk_bytes = bh * dims.k_dim * f;
  const size_t v_bytes = bh * dims.v_dim * f;
  const size_t state_bytes = bh * dims.k_dim * dims.v_dim * f;
  const bool raw = math.gate_mode == kda::KdaGateMode::kFromRaw;

  DeviceBuffer q, k, v, g, beta, a_log, dt_bias, state, out;
  const std::pair<DeviceBuffer*, size_t> sizes[] = {
      {&q, qk_bytes},  {&k, qk_bytes},        {&v, v_bytes},   {&g, qk_bytes},
      {&beta, bh * f}, {&state, state_bytes}, {&out, v_bytes},
  };
  for (const auto& [buf, bytes] : sizes)
    KDA_RETURN_IF_ERROR(buf->Allocate(bytes));
  KDA_RETURN_IF_ERROR(q.Upload(host_in.q, qk_bytes));
  KDA_RETURN_IF_ERROR(k.Upload(host_in.k, qk_bytes));
  KDA_RETURN_IF_ERROR(v.Upload(host_in.v, v_bytes));
  KDA_RETURN_IF_ERROR(g.Upload(host_in.g, qk_bytes));
  KDA_RETURN_IF_ERROR(beta.Upload(host_in.beta, bh * f));
  KDA_RETURN_IF_ERROR(state.Upload(host_state, state_bytes));
  kda::KdaInputs<float> dev;
  dev.q = q.get();
  dev.k = k.get();
  dev.v = v.get();
  dev.g = g.get();
  dev.beta = beta.get();
  if (raw) {
    const size_t a_bytes = dims.heads * f;
    const size_t dt_bytes = static_cast<size_t>(dims.heads) * dims.k_dim * f;
    KDA_RETURN_IF_ERROR(a_log.Allocate(a_bytes));
    KDA_RETURN_IF_ERROR(dt_bias.Allocate(dt_bytes));
    KDA_RETURN_IF_ERROR(a_log.Upload(host_in.a_log, a_bytes));
    KDA_RETURN_IF_ERROR(dt_bias.Upload(host_in.dt_bias, dt_bytes));
    dev.a_log = a_log.get();
    dev.dt_bias = dt_bias.get();
  }
  KDA_RETURN_IF_ERROR(
      KdaDecodeCudaDevice(dims, dev, state.get(), out.get(), math));
  KDA_RETURN_IF_ERROR(state.Download(host_state, state_bytes));
  KDA_RETURN_IF_ERROR(out.Download(host_out, v_bytes));
  return absl::OkStatus();
}

}  // namespace densegate::kernels::cuda
