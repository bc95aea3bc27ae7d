#include "kernels/kda/precision.h"

#include "absl/status/status.h"
#include "absl/strings/str_format.h"

namespace densegate::kernels::kda {

absl::string_view PrecisionName(Precision p) {
  switch (p) {
    case Precision::kIeee:
      return "ieee";
    case Precision::kTf32:
      return "tf32";
    case Precision::kTf32Rna:
      return "tf32_rna";
    case Precision::kTf32x3:
      return "tf32x3";
  }
  return "unknown";
}

absl::StatusOr<Precision> ParsePrecision(absl::string_view name) {
  for (Precision p : {Precision::kIeee, Precision::kTf32, Precision::kTf32Rna,
                      Precision::kTf32x3}) {
    if (name == PrecisionName(p)) return p;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown precision \"%s\": expected one of ieee, tf32, tf32_rna, tf32x3",
      name));
}

}  // namespace densegate::kernels::kda
