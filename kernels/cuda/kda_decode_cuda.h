// KDA decode on an NVIDIA GPU: host-side launch code for the kernel in
// kda_decode.cu (same math, layout and precision modes as
// kernels/kda/kda_decode.h; see that header for the recurrence).
//
// This code compiles without the CUDA toolkit: it talks to the kernel only
// through the C entry points of kda_decode_cuda_entry.h. Linked with
// :kda_decode_cuda (stub entry points) every call returns Unimplemented
// "built without CUDA"; linked with :kda_decode_cuda_gpu (nvcc-built
// kda_decode.cu, tagged manual) it runs on the GPU.
//
// Thread-safety: thread-safe (the CUDA runtime is); calls use the default
// stream and synchronize before returning.
#ifndef DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_H_
#define DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_H_

#include "absl/status/status.h"
#include "kernels/kda/kda_types.h"

namespace densegate::kernels::cuda {

// OK if the CUDA kernel is linked in and a device is present; otherwise
// Unimplemented ("built without CUDA") or FailedPrecondition (no device /
// driver error).
absl::Status KdaCudaStatus();

// One decode step with host-resident tensors: copies inputs and state to the
// device, launches, copies state and output back. Validates shapes first
// (InvalidArgument, as KdaDecode). math.precision selects the operand
// rounding; math.l2_eps is used as fp32.
absl::Status KdaDecodeCudaHost(const kda::KdaDims& dims,
                               const kda::KdaInputs<float>& host_in,
                               float* host_state, float* host_out,
                               const kda::KdaMath& math);

// The same on device pointers (no copies): launches and synchronizes.
absl::Status KdaDecodeCudaDevice(const kda::KdaDims& dims,
                                 const kda::KdaInputs<float>& device_in,
                                 float* device_state, float* device_out,
                                 const kda::KdaMath& math);

}  // namespace densegate::kernels::cuda

#endif  // DENSEGATE_KERNELS_CUDA_KDA_DECODE_CUDA_H_
