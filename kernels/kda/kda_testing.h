// Helpers shared by the KDA tests, the precision sweep and the benchmark:
// random inputs in the layout of kda_types.h (fp32 and an exact fp64 copy),
// and the error metric of docs/design.md, section 7 (rel_rms plus elementwise max).
//
// Not for production paths. Plain functions and value types;
// thread-compatible.
#ifndef DENSEGATE_KERNELS_KDA_KDA_TESTING_H_
#define DENSEGATE_KERNELS_KDA_KDA_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/kda/kda_types.h"

namespace densegate::kernels::kda::testing {

// rel_rms = RMS(out - ref) / RMS(ref); max_abs_err = max |out - ref|;
// max_rel_err = max_abs_err / max |ref|.
struct ErrorStats {
  double rel_rms = 0;
  double max_abs_err = 0;
  double max_rel_err = 0;
  double ref_rms = 0;
  int64_t count = 0;
  std::string ToString() const;
};
ErrorStats CompareToReference(const float* out, const double* ref, int64_t n);
ErrorStats CompareToReference(const double* out, const double* ref, int64_t n);
ErrorStats CompareToReference(const float* out, const float* ref, int64_t n);

struct RandomInputOptions {
  // g = logsigmoid(randn) / gate_scale: a large scale means slow decay.
  double gate_scale = 10.0;
  // Fill g/beta with raw gate inputs (g_raw, b_raw ~ randn) plus a_log and
  // dt_bias, for KdaGateMode::kFromRaw.
  bool raw_gates = false;
};

// Owns inputs for `dims` (dims.batch = sequences or tokens) in fp32 and the
// same values widened to fp64, so the references see identical inputs.
struct KdaHostInputs {
  KdaDims dims;
  std::vector<float> q, k, v, g, beta, a_log, dt_bias;
  std::vector<double> qd, kd, vd, gd, betad, a_logd, dt_biasd;

  KdaInputs<float> F() const;
  KdaInputs<double> D() const;
};

// q, k, v ~ randn; beta = sigmoid(randn); g as RandomInputOptions says.
KdaHostInputs MakeRandomInputs(const KdaDims& dims, uint64_t seed,
                               const RandomInputOptions& options = {});

// n values ~ scale * randn.
std::vector<float> RandomVector(int64_t n, uint64_t seed, double scale);

std::vector<double> Widen(const std::vector<float>& x);

// A seed that differs between runs (std::random_device mixed with the
// clock); tests print it so a failure can be replayed.
uint64_t FreshSeed();

}  // namespace densegate::kernels::kda::testing

#endif  // DENSEGATE_KERNELS_KDA_KDA_TESTING_H_
