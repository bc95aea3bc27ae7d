// Throughput of KV-cache quantization and dequantization, single thread.
//
// Each iteration converts 4 MiB of fp32 (1 Mi elements: 8192 vectors of 128,
// i.e. 256 tokens x 32 heads); bytes/s count the fp32 side (input of Quantize,
// output of Dequantize), so the figures of the two directions compare directly.
// Arguments: format (KvFormat as int), path (0 = portable, 1 = auto/AVX2).
//   bazel run -c opt //kernels/kvcache:quant_bench
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/kvcache/kv_quant.h"
#include "kernels/ops/cpu_path.h"

namespace densegate::kernels {
namespace {

constexpr size_t kDim = 128;
constexpr size_t kVectors = (4u << 20) / sizeof(float) / kDim;

struct Buffers {
  std::vector<float> in;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
  std::vector<float> out;
};

Buffers Make(KvFormat f) {
  Buffers b;
  b.in.resize(kVectors * kDim);
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (float& x : b.in) x = normal(rng);
  b.codes.resize(KvCodeBytes(f, kVectors, kDim));
  b.scales.resize(KvScaleBytes(f, ScaleDtype::kFp16, kVectors) + 1);
  b.out.resize(b.in.size());
  return b;
}

CpuPath PathArg(const benchmark::State& state) {
  return state.range(1) == 0 ? CpuPath::kPortable : CpuPath::kAuto;
}

void SetLabel(benchmark::State& state, KvFormat f) {
  const CpuPath path = *ResolveCpuPath(PathArg(state));
  state.SetLabel(std::string(KvFormatName(f)) + "/" +
                 std::string(CpuPathName(path)) +
                 (f == KvFormat::kInt8 ? "/fp16-scales" : ""));
}

void BM_Quantize(benchmark::State& state) {
  const KvFormat f = static_cast<KvFormat>(state.range(0));
  Buffers b = Make(f);
  const KvQuantOptions opt{.path = PathArg(state)};
  for (auto _ : state) {
    absl::Status s = Quantize(f, b.in.data(), kVectors, kDim, b.codes.data(),
                              {ScaleDtype::kFp16, b.scales.data()}, opt);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(b.codes.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * b.in.size() * sizeof(float));
  SetLabel(state, f);
}

void BM_Dequantize(benchmark::State& state) {
  const KvFormat f = static_cast<KvFormat>(state.range(0));
  Buffers b = Make(f);
  const KvQuantOptions opt{.path = PathArg(state)};
  if (!Quantize(f, b.in.data(), kVectors, kDim, b.codes.data(),
                {ScaleDtype::kFp16, b.scales.data()}, opt)
           .ok()) {
    state.SkipWithError("quantize failed");
  }
  for (auto _ : state) {
    absl::Status s =
        Dequantize(f, b.codes.data(), {ScaleDtype::kFp16, b.scales.data()},
                   kVectors, kDim, b.out.data(), opt);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(b.out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * b.out.size() * sizeof(float));
  SetLabel(state, f);
}

void Args(benchmark::internal::Benchmark* b) {
  for (int f = 0; f <= static_cast<int>(KvFormat::kInt8); ++f) {
    for (int path : {1, 0}) b->Args({f, path});
  }
  b->ArgNames({"format", "avx2"});
}

BENCHMARK(BM_Quantize)->Apply(Args);
BENCHMARK(BM_Dequantize)->Apply(Args);

}  // namespace
}  // namespace densegate::kernels
