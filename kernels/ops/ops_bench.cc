// Speed of the ops, single thread unless the name says otherwise.
//   bazel run -c opt //kernels/ops:ops_bench
// GEMM rows report FLOP/s (2*M*N*K per iteration) for the blocked kernel on the
// AVX2 and portable paths and for the naive triple loop (i-j-k, float
// accumulator) in the same run, at decode (M = 1, 8) and prefill (M = 256)
// shapes with N = K = 1024. Vector ops report the fp32 bytes read per second.
// Rates use CPU time (the machine may be shared) except the thread-scaling rows,
// which use wall time.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "kernels/ops/attention.h"
#include "kernels/ops/cpu_path.h"
#include "kernels/ops/gemm.h"
#include "kernels/ops/reference.h"
#include "kernels/ops/vector_ops.h"

namespace densegate::kernels {
namespace {

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

void SetFlops(benchmark::State& state, double m, double n, double k) {
  state.counters["FLOP/s"] = benchmark::Counter(
      2.0 * m * n * k, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: M, N, K, path (0 portable, 1 auto), b_transposed, threads.
void BM_Gemm(benchmark::State& state) {
  const size_t m = state.range(0), n = state.range(1), k = state.range(2);
  const CpuPath path = state.range(3) == 0 ? CpuPath::kPortable : CpuPath::kAuto;
  const bool bt = state.range(4) != 0;
  const int threads = static_cast<int>(state.range(5));
  const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2);
  std::vector<float> c(m * n);
  const GemmOptions opt{.b_transposed = bt, .num_threads = threads, .path = path};
  for (auto _ : state) {
    absl::Status s = Gemm(m, n, k, a.data(), k, b.data(), bt ? k : n, c.data(), n, opt);
    if (!s.ok()) state.SkipWithError(std::string(s.message()).c_str());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, m, n, k);
  state.SetLabel(std::string(CpuPathName(*ResolveCpuPath(path))) +
                 (bt ? "/B^T" : "") +
                 (threads > 1 ? "/threads=" + std::to_string(threads) : ""));
}

void BM_GemmNaive(benchmark::State& state) {
  const size_t m = state.range(0), n = state.range(1), k = state.range(2);
  const std::vector<float> a = Random(m * k, 1), b = Random(k * n, 2);
  std::vector<float> c(m * n);
  for (auto _ : state) {
    GemmNaive(m, n, k, a.data(), b.data(), c.data());
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  SetFlops(state, m, n, k);
  state.SetLabel("naive i-j-k");
}

void GemmShapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"M", "N", "K", "avx2", "bt", "threads"});
  for (int m : {1, 8, 256}) {
    b->Args({m, 1024, 1024, 1, 0, 1});
    b->Args({m, 1024, 1024, 1, 1, 1});
    b->Args({m, 1024, 1024, 0, 0, 1});
  }
}

BENCHMARK(BM_Gemm)->Apply(GemmShapes)->Unit(benchmark::kMicrosecond);
// Gemm starts its own threads, whose CPU time the benchmark thread's clock does
// not see: rate by wall time.
BENCHMARK(BM_Gemm)
    ->ArgNames({"M", "N", "K", "avx2", "bt", "threads"})
    ->Args({256, 1024, 1024, 1, 0, 1})
    ->Args({256, 1024, 1024, 1, 0, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GemmNaive)
    ->ArgNames({"M", "N", "K"})
    ->Args({1, 1024, 1024})
    ->Args({8, 1024, 1024})
    ->Args({256, 1024, 1024})
    ->Unit(benchmark::kMicrosecond);

CpuPath PathArg(const benchmark::State& state) {
  return state.range(1) == 0 ? CpuPath::kPortable : CpuPath::kAuto;
}

// Args: dim, path. 16 rows per iteration.
void BM_RmsNorm(benchmark::State& state) {
  const size_t dim = state.range(0), rows = 16;
  const std::vector<float> x = Random(rows * dim, 3), w = Random(dim, 4);
  std::vector<float> out(rows * dim);
  for (auto _ : state) {
    (void)RmsNorm(x.data(), w.data(), rows, dim, 1e-6f, out.data(), PathArg(state));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * sizeof(float));
  state.SetLabel(std::string(CpuPathName(*ResolveCpuPath(PathArg(state)))));
}
BENCHMARK(BM_RmsNorm)->ArgNames({"dim", "avx2"})->Args({4096, 1})->Args({4096, 0});

void BM_Softmax(benchmark::State& state) {
  const size_t n = state.range(0);
  std::vector<float> x = Random(n, 5);
  for (float& v : x) v *= 10.0f;
  std::vector<float> out(n);
  for (auto _ : state) {
    (void)Softmax(x.data(), n, n, out.data(), PathArg(state));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n * sizeof(float));
  state.SetLabel(std::string(CpuPathName(*ResolveCpuPath(PathArg(state)))));
}
BENCHMARK(BM_Softmax)
    ->ArgNames({"n", "avx2"})
    ->Args({4096, 1})
    ->Args({4096, 0})
    ->Args({32768, 1});

void BM_SiluMul(benchmark::State& state) {
  const size_t n = state.range(0);
  const std::vector<float> g = Random(n, 6), u = Random(n, 7);
  std::vector<float> out(n);
  for (auto _ : state) {
    (void)SiluMul(g.data(), u.data(), n, out.data(), PathArg(state));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * n * sizeof(float));
  state.SetLabel(std::string(CpuPathName(*ResolveCpuPath(PathArg(state)))));
}
BENCHMARK(BM_SiluMul)->ArgNames({"n", "avx2"})->Args({11008, 1})->Args({11008, 0});

// One decode query of one head over n_keys cached tokens (head_dim 128).
void BM_AttendOne(benchmark::State& state) {
  const size_t n_keys = state.range(0), d = 128;
  const std::vector<float> kv = Random(n_keys * 2 * d, 8), q = Random(d, 9);
  std::vector<float> out(d), probs(n_keys);
  const AttentionShape shape{n_keys, d, d, 1.0f / std::sqrt(128.0f)};
  for (auto _ : state) {
    (void)AttendOneStrided(q.data(), kv.data(), 2 * d, kv.data() + d, 2 * d, shape,
                           out.data(), probs.data(), PathArg(state));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * n_keys * 2 * d * sizeof(float));
  state.SetLabel(std::string(CpuPathName(*ResolveCpuPath(PathArg(state)))));
}
BENCHMARK(BM_AttendOne)->ArgNames({"keys", "avx2"})->Args({4096, 1})->Args({4096, 0});

}  // namespace
}  // namespace densegate::kernels
