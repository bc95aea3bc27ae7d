// CPU code-path selection shared by the kernels in kernels/ops and kernels/kvcache.
//
// Every vectorized kernel here has two implementations: a portable one (plain C++,
// any x86-64 or other target) and an AVX2 one (AVX2 + FMA + F16C, compiled with
// per-function target attributes so the rest of the binary stays baseline x86-64).
// The two are written to give bit-identical results; tests run both and compare.
// Callers pick a path with CpuPath: kAuto picks AVX2 when the CPU has it, unless
// the environment variable DENSEGATE_KERNELS_PATH=portable forces the portable
// path for the whole process (read once, at the first kAuto resolution).
//
// Thread-safety: all functions are thread-safe (feature detection and the
// environment are read once, under a function-local static).
#ifndef DENSEGATE_KERNELS_OPS_CPU_PATH_H_
#define DENSEGATE_KERNELS_OPS_CPU_PATH_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace densegate::kernels {

enum class CpuPath {
  kAuto,      // kAvx2 when supported and not forced off by the environment.
  kPortable,  // Plain C++; always available.
  kAvx2,      // AVX2 + FMA + F16C; FailedPrecondition where the CPU lacks them.
};

// Name used in logs and benchmark labels: "auto", "portable", "avx2".
absl::string_view CpuPathName(CpuPath path);

// True when the CPU (and OS) support AVX2, FMA and F16C.
bool CpuSupportsAvx2();

// The path kAuto resolves to in this process: kAvx2 if supported, unless
// DENSEGATE_KERNELS_PATH is "portable".
CpuPath DefaultCpuPath();

// Resolves kAuto; checks that an explicitly requested kAvx2 is supported.
// Never returns kAuto.
absl::StatusOr<CpuPath> ResolveCpuPath(CpuPath requested);

}  // namespace densegate::kernels

#endif  // DENSEGATE_KERNELS_OPS_CPU_PATH_H_
