// kda_decode_cuda_check: runs the CUDA KDA decode kernel against the fp64
// CPU reference (and the CPU fp32 tiled kernel) for several shapes, gate
// modes and every precision mode, then times the device-resident kernel at
// Kimi-Linear shapes. Needs a GPU; build with the manual targets:
//   bazel run -c opt //kernels/cuda:kda_decode_cuda_check
// Exit code 0 when every check passes, 1 otherwise, 2 when no GPU.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/kda_decode_cuda.h"
#include "kernels/cuda/kda_decode_cuda_entry.h"
#include "kernels/kda/kda_decode.h"
#include "kernels/kda/kda_testing.h"
#include "kernels/kda/precision.h"

namespace densegate::kernels::cuda {
namespace {

using kda::KdaDims;
using kda::Precision;

bool CheckOne(const KdaDims& dims, Precision p, bool raw, int steps,
              uint64_t seed) {
  const int64_t ns =
      static_cast<int64_t>(dims.batch) * dims.heads * dims.k_dim * dims.v_dim;
  const int64_t no = static_cast<int64_t>(dims.batch) * dims.heads * dims.v_dim;
  std::vector<float> gpu_state = kda::testing::RandomVector(ns, seed, 0.2);
  std::vector<float> cpu_state = gpu_state;
  std::vector<double> ref_state = kda::testing::Widen(gpu_state);
  std::vector<float> gpu_out(no), cpu_out(no);
  std::vector<double> ref_out(no);
  kda::KdaMath math;
  math.precision = p;
  math.gate_mode =
      raw ? kda::KdaGateMode::kFromRaw : kda::KdaGateMode::kPrecomputed;
  kda::testing::RandomInputOptions gen;
  gen.raw_gates = raw;
  kda::KdaDecodeOptions cpu;
  cpu.math = math;
  for (int s = 0; s < steps; ++s) {
    const auto in = kda::testing::MakeRandomInputs(dims, seed + 1 + s, gen);
    absl::Status st =
        KdaDecodeCudaHost(dims, in.F(), gpu_state.data(), gpu_out.data(), math);
    if (!st.ok()) {
      std::printf("FAIL %s\n", st.ToString().c_str());
      return false;
    }
    st = kda::KdaDecode(dims, in.F(), cpu_state.data(), cpu_out.data(), cpu);
    if (st.ok()) {
      st = kda::KdaDecodeReference(dims, in.D(), ref_state.data(),
                                   ref_out.data(), math);
    }
    if (!st.ok()) {
      std::printf("FAIL cpu %s\n", st.ToString().c_str());
      return false;
    }
  }
  const auto go =
      kda::testing::CompareToReference(gpu_out.data(), ref_out.data(), no);
  const auto gs =
      kda::testing::CompareToReference(gpu_state.data(), ref_state.data(), ns);
  const auto co =
      kda::testing::CompareToReference(cpu_out.data(), ref_out.data(), no);
  const bool fp32_class = p == Precision::kIeee || p == Precision::kTf32x3;
  // TF32 modes: the GPU must show TF32-sized error (the rounding happened)
  // but stay within the short-context tolerance, like the CPU kernel.
  const bool ok = fp32_class ? (go.rel_rms < 2e-6 && gs.rel_rms < 2e-6)
                             : (go.rel_rms < 2e-3 && go.rel_rms > 1e-5 &&
                                go.rel_rms < 4 * co.rel_rms + 1e-6);
  std::printf(
      "%s batch=%d heads=%d K=%d V=%d %-8s gates=%s: gpu out rel_rms=%.3e "
      "max=%.3e state rel_rms=%.3e | cpu tiled out rel_rms=%.3e\n",
      ok ? "ok  " : "FAIL", dims.batch, dims.heads, dims.k_dim, dims.v_dim,
      std::string(kda::PrecisionName(p)).c_str(), raw ? "raw" : "given",
      go.rel_rms, go.max_abs_err, gs.rel_rms, co.rel_rms);
  return ok;
}

void TimeDevice(int batch) {
  const KdaDims dims{batch, 32, 128, 128};
  const int64_t ns = static_cast<int64_t>(batch) * 32 * 128 * 128;
  const auto in = kda::testing::MakeRandomInputs(dims, 3);
  const std::vector<float> state = kda::testing::RandomVector(ns, 4, 0.1);
  const int64_t nqk = static_cast<int64_t>(batch) * 32 * 128;
  float *q, *k, *v, *g, *beta, *s, *o;
  DgCudaMalloc(reinterpret_cast<void**>(&q), nqk * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&k), nqk * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&v), nqk * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&g), nqk * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&beta), batch * 32 * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&s), ns * 4);
  DgCudaMalloc(reinterpret_cast<void**>(&o), nqk * 4);
  DgCudaMemcpyHostToDevice(q, in.q.data(), nqk * 4);
  DgCudaMemcpyHostToDevice(k, in.k.data(), nqk * 4);
  DgCudaMemcpyHostToDevice(v, in.v.data(), nqk * 4);
  DgCudaMemcpyHostToDevice(g, in.g.data(), nqk * 4);
  DgCudaMemcpyHostToDevice(beta, in.beta.data(), batch * 32 * 4);
  DgCudaMemcpyHostToDevice(s, state.data(), ns * 4);
  kda::KdaInputs<float> dev{q, k, v, g, beta};
  for (Precision p : {Precision::kIeee, Precision::kTf32, Precision::kTf32x3}) {
    kda::KdaMath math;
    math.precision = p;
    (void)KdaDecodeCudaDevice(dims, dev, s, o, math);  // Warm up.
    double best = 1e30;
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const absl::Status st = KdaDecodeCudaDevice(dims, dev, s, o, math);
      const double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
              .count();
      if (!st.ok()) {
        std::printf("timing failed: %s\n", st.ToString().c_str());
        return;
      }
      best = std::min(best, dt);
    }
    std::printf(
        "time batch=%d heads=32 K=V=128 %-8s: %.1f us/step, %.0f GB/s "
        "state traffic (incl. launch + sync)\n",
        batch, std::string(kda::PrecisionName(p)).c_str(), best * 1e6,
        2.0 * ns * 4 / best / 1e9);
  }
  for (float* ptr : {q, k, v, g, beta, s, o}) DgCudaFree(ptr);
}

}  // namespace
}  // namespace densegate::kernels::cuda

int main() {
  using namespace densegate::kernels;
  const absl::Status avail = cuda::KdaCudaStatus();
  if (!avail.ok()) {
    std::printf("no GPU: %s\n", avail.ToString().c_str());
    return 2;
  }
  bool ok = true;
  const kda::KdaDims shapes[] = {{4, 32, 128, 128}, {3, 5, 37, 53},
                                 {2, 2, 256, 256},  {1, 4, 1, 255},
                                 {2, 3, 64, 33},    {1, 1, 200, 8}};
  for (const kda::KdaDims& d : shapes) {
    for (kda::Precision p :
         {kda::Precision::kIeee, kda::Precision::kTf32,
          kda::Precision::kTf32Rna, kda::Precision::kTf32x3}) {
      ok &= cuda::CheckOne(d, p, /*raw=*/false, 4, 17);
    }
    ok &= cuda::CheckOne(d, kda::Precision::kIeee, /*raw=*/true, 3, 23);
  }
  for (int batch : {1, 8, 32}) cuda::TimeDevice(batch);
  std::printf("%s\n", ok ? "ALL OK" : "SOME CHECKS FAILED");
  return ok ? 0 : 1;
}
