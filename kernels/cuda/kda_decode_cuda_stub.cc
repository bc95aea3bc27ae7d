// The entry points of kda_decode_cuda_entry.h for binaries built without
// CUDA: every call fails with kDgCudaNotBuilt, so KdaDecodeCuda reports a
// clear "built without CUDA" status instead of failing to link.
#include "kernels/cuda/kda_decode_cuda_entry.h"

extern "C" {

int DgCudaDeviceCount(int* count) {
  *count = 0;
  return kDgCudaNotBuilt;
}
int DgCudaMalloc(void** ptr, size_t) {
  *ptr = nullptr;
  return kDgCudaNotBuilt;
}
int DgCudaFree(void*) { return kDgCudaNotBuilt; }
int DgCudaMemcpyHostToDevice(void*, const void*, size_t) {
  return kDgCudaNotBuilt;
}
int DgCudaMemcpyDeviceToHost(void*, const void*, size_t) {
  return kDgCudaNotBuilt;
}
int DgCudaDeviceSynchronize(void) { return kDgCudaNotBuilt; }
const char* DgCudaErrorString(int code) {
  return code == kDgCudaNotBuilt ? "built without CUDA" : "unknown error";
}
int DgKdaDecodeLaunch(const DgKdaDecodeParams*) { return kDgCudaNotBuilt; }

}  // extern "C"
