#include "kernels/ops/cpu_path.h"

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"

namespace densegate::kernels {

absl::string_view CpuPathName(CpuPath path) {
  switch (path) {
    case CpuPath::kAuto:
      return "auto";
    case CpuPath::kPortable:
      return "portable";
    case CpuPath::kAvx2:
      return "avx2";
  }
  return "unknown";
}

bool CpuSupportsAvx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return supported;
#else
  return false;
#endif
}

CpuPath DefaultCpuPath() {
  static const CpuPath path = [] {
    const char* env = std::getenv("DENSEGATE_KERNELS_PATH");
    if (env != nullptr && std::strcmp(env, "portable") == 0) {
      return CpuPath::kPortable;
    }
    return CpuSupportsAvx2() ? CpuPath::kAvx2 : CpuPath::kPortable;
  }();
  return path;
}

absl::StatusOr<CpuPath> ResolveCpuPath(CpuPath requested) {
  switch (requested) {
    case CpuPath::kAuto:
      return DefaultCpuPath();
    case CpuPath::kPortable:
      return CpuPath::kPortable;
    case CpuPath::kAvx2:
      if (!CpuSupportsAvx2()) {
        return absl::FailedPreconditionError(
            "CpuPath::kAvx2 requested but this CPU lacks AVX2/FMA/F16C; use "
            "CpuPath::kAuto or CpuPath::kPortable");
      }
      return CpuPath::kAvx2;
  }
  return absl::InvalidArgumentError("unknown CpuPath value");
}

}  // namespace densegate::kernels
