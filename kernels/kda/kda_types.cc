#include "kernels/kda/kda_types.h"

#include "absl/strings/str_format.h"

namespace densegate::kernels::kda {

absl::Status ValidateKdaDims(const KdaDims& dims, const char* what) {
  auto check = [&](const char* name, int value, int lo,
                   int hi) -> absl::Status {
    if (value < lo || value > hi) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s must be in [%d, %d], got %d (dims batch=%d heads=%d K=%d "
          "V=%d)",
          what, name, lo, hi, value, dims.batch, dims.heads, dims.k_dim,
          dims.v_dim));
    }
    return absl::OkStatus();
  };
  constexpr int kIntMax = 0x7fffffff;
  if (auto s = check("batch", dims.batch, 1, kIntMax); !s.ok()) return s;
  if (auto s = check("heads", dims.heads, 1, kIntMax); !s.ok()) return s;
  if (auto s = check("k_dim", dims.k_dim, 1, kKdaMaxDim); !s.ok()) return s;
  if (auto s = check("v_dim", dims.v_dim, 1, kKdaMaxDim); !s.ok()) return s;
  return absl::OkStatus();
}

template <typename T>
absl::Status ValidateKdaInputs(const KdaDims& dims, const KdaInputs<T>& in,
                               KdaGateMode gate_mode, const char* what) {
  if (auto s = ValidateKdaDims(dims, what); !s.ok()) return s;
  auto missing = [&](const char* name) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: input pointer %s is null", what, name));
  };
  if (in.q == nullptr) return missing("q");
  if (in.k == nullptr) return missing("k");
  if (in.v == nullptr) return missing("v");
  if (in.g == nullptr) return missing("g");
  if (in.beta == nullptr) return missing("beta");
  if (gate_mode == KdaGateMode::kFromRaw) {
    if (in.a_log == nullptr) return missing("a_log (needed by kFromRaw)");
    if (in.dt_bias == nullptr) return missing("dt_bias (needed by kFromRaw)");
  }
  return absl::OkStatus();
}

template absl::Status ValidateKdaInputs<float>(const KdaDims&,
                                               const KdaInputs<float>&,
                                               KdaGateMode, const char*);
template absl::Status ValidateKdaInputs<double>(const KdaDims&,
                                                const KdaInputs<double>&,
                                                KdaGateMode, const char*);

}  // namespace densegate::kernels::kda
