// The C-ABI boundary between the KDA CUDA kernel (kda_decode.cu, compiled by
// nvcc) and the host launch code (kda_decode_cuda.cc, compiled by the normal
// C++ toolchain without any CUDA header).
//
// Two implementations exist: kda_decode.cu (the real one, calling the CUDA
// runtime) and kda_decode_cuda_stub.cc (every call returns
// kDgCudaNotBuilt), so the host code builds and its error paths are tested
// on machines without the CUDA toolkit. Exactly one is linked.
//
// Every function returns 0 on success, a cudaError_t value on a CUDA error,
// or kDgCudaNotBuilt. Thread-safety: as the CUDA runtime (thread-safe).
#ifndef DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_ENTRY_H_
#define DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_ENTRY_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Returned by the stub: this binary has no CUDA kernel.
#define kDgCudaNotBuilt (-1)

// Arguments of one decode step; every pointer is a device pointer. Layout as
// kernels/kda/kda_types.h: state [batch][heads][K][V], q/k/g [batch][heads][K],
// v/out [batch][heads][V], beta [batch][heads], a_log [heads],
// dt_bias [heads][K].
typedef struct DgKdaDecodeParams {
  int batch;
  int heads;
  int k_dim;          // 1..256
  int v_dim;          // 1..256
  int precision;      // densegate::kernels::kda::Precision as int.
  int gate_from_raw;  // 1: g/beta are raw; a_log/dt_bias are used.
  float l2_eps;
  const float* q;
  const float* k;
  const float* v;
  const float* g;
  const float* beta;
  const float* a_log;
  const float* dt_bias;
  float* state;
  float* out;
} DgKdaDecodeParams;

// Number of CUDA devices in *count (0 if none).
int DgCudaDeviceCount(int* count);
int DgCudaMalloc(void** ptr, size_t bytes);
int DgCudaFree(void* ptr);
int DgCudaMemcpyHostToDevice(void* dst, const void* src, size_t bytes);
int DgCudaMemcpyDeviceToHost(void* dst, const void* src, size_t bytes);
int DgCudaDeviceSynchronize(void);
// A static string naming the error (also for kDgCudaNotBuilt).
const char* DgCudaErrorString(int code);
// Launches one KDA decode step on the default stream (asynchronous); the
// return value is the launch error, if any. Shapes must be valid.
int DgKdaDecodeLaunch(const DgKdaDecodeParams* params);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_ENTRY_H_
