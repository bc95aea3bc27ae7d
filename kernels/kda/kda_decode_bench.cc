// Google Benchmark for the KDA decode variants at Kimi-Linear shapes
// (32 heads, K = V = 128; batch 1, 8, 32), plus a STREAM-like memory
// bandwidth probe over buffers of the same 64 MiB size, so the decode
// kernels can be quoted as a fraction of the bandwidth measured in the same
// run.
//
// bytes_per_second of the decode benchmarks counts one read and one write of
// the state per call (2 * batch * heads * K * V * 4 bytes), the least any
// version must move. The probe counts bytes the way STREAM does (copy: read
// a + write b; triad: read b, c + write a; update: read + write a in place,
// the access pattern of a state update).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/kda/kda_decode.h"
#include "kernels/kda/kda_testing.h"
#include "kernels/kda/thread_pool.h"

namespace densegate::kernels::kda {
namespace {

constexpr int kHeads = 32;
constexpr int kDim = 128;

// Inputs and a starting state per batch size, made once: Google Benchmark
// calls a benchmark function several times while it sizes the run.
struct Case {
  testing::KdaHostInputs in;
  std::vector<float> state;
};
const Case& CaseFor(const KdaDims& dims) {
  static std::map<int, Case>* cases = new std::map<int, Case>();
  auto it = cases->find(dims.batch);
  if (it == cases->end()) {
    const int64_t n =
        static_cast<int64_t>(dims.batch) * dims.heads * dims.k_dim * dims.v_dim;
    it = cases
             ->emplace(dims.batch, Case{testing::MakeRandomInputs(dims, 1234),
                                        testing::RandomVector(n, 99, 0.1)})
             .first;
  }
  return it->second;
}

void RunDecode(benchmark::State& state, KdaDecodeVariant variant, int threads) {
  const KdaDims dims{static_cast<int>(state.range(0)), kHeads, kDim, kDim};
  const int64_t state_elems =
      static_cast<int64_t>(dims.batch) * dims.heads * dims.k_dim * dims.v_dim;
  const Case& c = CaseFor(dims);
  const testing::KdaHostInputs& in = c.in;
  std::vector<float> s = c.state;
  std::vector<float> out(static_cast<int64_t>(dims.batch) * dims.heads *
                         dims.v_dim);
  KdaDecodeOptions opt;
  opt.variant = variant;
  opt.num_threads = threads;
  for (auto _ : state) {
    const absl::Status st = KdaDecode(dims, in.F(), s.data(), out.data(), opt);
    if (!st.ok()) {
      state.SkipWithError(std::string(st.message()).c_str());
      break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * state_elems *
                          static_cast<int64_t>(sizeof(float)));
  state.counters["threads"] =
      threads == kAllThreads ? ThreadPool::HardwareThreads() : threads;
  state.SetLabel(std::string(SimdPathName(ResolvedAutoSimdPath())));
}

void BM_KdaDecode_naive(benchmark::State& state) {
  RunDecode(state, KdaDecodeVariant::kNaive, 1);
}
void BM_KdaDecode_fused(benchmark::State& state) {
  RunDecode(state, KdaDecodeVariant::kFused, 1);
}
void BM_KdaDecode_tiled(benchmark::State& state) {
  RunDecode(state, KdaDecodeVariant::kTiled, 1);
}
void BM_KdaDecode_tiled_mt(benchmark::State& state) {
  RunDecode(state, KdaDecodeVariant::kTiled, kAllThreads);
}
// Whatever KdaDecodeOptions picks by default: what the runtime and the
// kernel runner get without choosing (one thread).
void BM_KdaDecode_default(benchmark::State& state) {
  RunDecode(state, KdaDecodeOptions().variant, 1);
}

BENCHMARK(BM_KdaDecode_naive)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KdaDecode_fused)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KdaDecode_tiled)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KdaDecode_default)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_KdaDecode_tiled_mt)
    ->Arg(1)
    ->Arg(8)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

// --- Bandwidth probe -------------------------------------------------------

constexpr int64_t kProbeBytes = 64ll << 20;  // Same size as batch 32's state.
constexpr int64_t kProbeElems = kProbeBytes / sizeof(float);

enum ProbeMode { kCopy = 0, kTriad = 1, kUpdate = 2 };

void ProbeRange(ProbeMode mode, float* a, float* b, const float* c, int64_t lo,
                int64_t hi) {
  switch (mode) {
    case kCopy:
      std::memcpy(b + lo, a + lo, (hi - lo) * sizeof(float));
      break;
    case kTriad:
      for (int64_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0f * c[i];
      break;
    case kUpdate:
      for (int64_t i = lo; i < hi; ++i) a[i] = a[i] * 0.999f + 1e-3f;
      break;
  }
}

// Args: mode (0 copy, 1 triad, 2 update), threads (0 = all).
void BM_MemoryBandwidth(benchmark::State& state) {
  const ProbeMode mode = static_cast<ProbeMode>(state.range(0));
  const int threads = state.range(1) == 0 ? ThreadPool::HardwareThreads()
                                          : static_cast<int>(state.range(1));
  std::vector<float> a(kProbeElems, 1.0f), b(kProbeElems, 2.0f),
      c(kProbeElems, 0.5f);
  // One slice per thread-sized piece; 64 pieces balance dynamically.
  constexpr int64_t kPieces = 64;
  const int64_t piece = kProbeElems / kPieces;
  auto body = [&](int64_t p) {
    ProbeRange(mode, a.data(), b.data(), c.data(), p * piece, (p + 1) * piece);
  };
  for (auto _ : state) {
    ThreadPool::Shared().ParallelFor(kPieces, threads, body);
    benchmark::DoNotOptimize(a.data());
    benchmark::DoNotOptimize(b.data());
    benchmark::ClobberMemory();
  }
  const int64_t arrays = mode == kTriad ? 3 : 2;
  state.SetBytesProcessed(state.iterations() * arrays * kProbeBytes);
  state.counters["threads"] = threads;
  state.SetLabel(mode == kCopy ? "copy" : mode == kTriad ? "triad" : "update");
}

BENCHMARK(BM_MemoryBandwidth)
    ->ArgNames({"mode", "threads"})
    ->Args({kCopy, 1})
    ->Args({kTriad, 1})
    ->Args({kUpdate, 1})
    ->Args({kCopy, 0})
    ->Args({kTriad, 0})
    ->Args({kUpdate, 0})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace densegate::kernels::kda

BENCHMARK_MAIN();
