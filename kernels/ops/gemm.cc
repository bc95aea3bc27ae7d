#include "kernels/ops/gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "kernels/ops/gemm_internal.h"

namespace densegate::kernels {
namespace {

using gemm_internal::kMr;
using gemm_internal::kNr;
using gemm_internal::MicroKernel;

// Blocking: a kc x 16 B micro-panel (16 KiB) stays in L1 while the row panels of
// an mc x kc A block (96 KiB) stream from L2; a kc x nc B block (1 MiB) is
// shared by all A blocks from L2/L3.
constexpr size_t kKc = 256;
constexpr size_t kMc = 96;   // Multiple of kMr.
constexpr size_t kNc = 1024;  // Multiple of kNr.
// Up to this many rows (one A block) B is read in place instead of packed:
// every B element is then loaded from memory once and reused from L1 for the
// other row panels, and the packing pass (a full extra read and write of B,
// which dominates at decode sizes) disappears.
constexpr size_t kDirectBMaxRows = kMc;

struct AlignedDeleter {
  void operator()(float* p) const { operator delete[](p, std::align_val_t(64)); }
};
using AlignedBuffer = std::unique_ptr<float[], AlignedDeleter>;
AlignedBuffer Allocate(size_t n) {
  return AlignedBuffer(
      static_cast<float*>(operator new[](n * sizeof(float), std::align_val_t(64))));
}

struct Problem {
  size_t k;
  const float* a;
  size_t lda;
  const float* b;
  size_t ldb;
  bool b_transposed;
  float* c;
  size_t ldc;
  float alpha;
  float beta;
  bool avx2;
};

// Row panels of up to kMr rows: panel at row r0 is stored at ap + r0 * kc with
// element (r, p) at [p * rows + r].
void PackA(const float* a, size_t lda, size_t mc, size_t kc, float* ap) {
  for (size_t r0 = 0; r0 < mc; r0 += kMr) {
    const size_t rows = std::min<size_t>(kMr, mc - r0);
    float* dst = ap + r0 * kc;
    for (size_t r = 0; r < rows; ++r) {
      const float* src = a + (r0 + r) * lda;
      for (size_t p = 0; p < kc; ++p) dst[p * rows + r] = src[p];
    }
  }
}

// One 16-column panel of B (K x N layout): dst[p * 16 + j], zero padded.
void PackBPanel(const float* b, size_t ldb, size_t kc, size_t cols, float* dst) {
  for (size_t p = 0; p < kc; ++p) {
    std::memcpy(dst + p * kNr, b + p * ldb, cols * sizeof(float));
    std::fill(dst + p * kNr + cols, dst + (p + 1) * kNr, 0.0f);
  }
}

// One 16-column panel of B given transposed (N x K): bt[j * ldbt + p].
void PackBTransposedPanel(const float* bt, size_t ldbt, size_t kc, size_t cols,
                          float* dst, bool avx2) {
  if (avx2) {
    gemm_internal::PackBTransposedAvx2(kc, static_cast<int>(cols), bt, ldbt,
                                       dst);
    return;
  }
  for (size_t p = 0; p < kc; ++p) {
    for (size_t j = 0; j < cols; ++j) dst[p * kNr + j] = bt[j * ldbt + p];
    for (size_t j = cols; j < kNr; ++j) dst[p * kNr + j] = 0.0f;
  }
}

// C = alpha * T (+ beta * C) for a rows x cols corner of a tile.
void Epilogue(const float* tile, size_t rows, size_t cols, float* c,
              size_t ldc, float alpha, float beta, size_t ldt = kNr) {
  for (size_t r = 0; r < rows; ++r) {
    for (size_t j = 0; j < cols; ++j) {
      const float t = alpha * tile[r * ldt + j];
      if (beta == 0.0f) {
        c[r * ldc + j] = t;
      } else {
        const float u = beta * c[r * ldc + j];
        c[r * ldc + j] = t + u;
      }
    }
  }
}

// Few rows (<= kStreamMaxRows), AVX2: stream B (either layout) through
// L1-resident accumulators, with no packing pass and contiguous reads of B.
void RunStreaming(const Problem& pb, size_t i0, size_t i1, size_t j0,
                  size_t j1) {
  constexpr size_t kAccFloats = 4096;  // 16 KiB of accumulators.
  alignas(64) float y[kAccFloats];
  const size_t rows = i1 - i0;
  const size_t block = std::max<size_t>(kAccFloats / rows / 32 * 32, 32);
  for (size_t jb = j0; jb < j1; jb += block) {
    const size_t cols = std::min(block, j1 - jb);
    if (pb.b_transposed) {
      gemm_internal::StreamRowsTransposedAvx2(rows, cols, pb.k,
                                              pb.a + i0 * pb.lda, pb.lda,
                                              pb.b + jb * pb.ldb, pb.ldb, y,
                                              block);
    } else {
      gemm_internal::StreamRowsAvx2(rows, cols, pb.k, pb.a + i0 * pb.lda,
                                    pb.lda, pb.b + jb, pb.ldb, y, block);
    }
    Epilogue(y, rows, cols, pb.c + i0 * pb.ldc + jb, pb.ldc, pb.alpha, pb.beta,
             block);
  }
}

// Streams the last rows of [i0, i1) that the micro-kernel serves worse
// (AVX2, few rows); returns where the rows left for it end.
size_t StreamFewRows(const Problem& pb, size_t i0, size_t i1, size_t j0, size_t j1) {
  if (!pb.avx2 || i1 - i0 > kDirectBMaxRows) return i1;
  // Measured with 1024 x 1024 B. K x N layout: streaming beats the
  // micro-kernel for up to 4 rows, a full 6-row panel beats streaming 5 or 6,
  // so the rows that do not fill a 6-row panel (if at most 4) are streamed.
  // Transposed B streams more slowly (in-register transposes): only whole
  // problems of up to 3 rows go that way.
  const size_t m = i1 - i0;
  size_t rest = 0;
  if (!pb.b_transposed) {
    rest = m <= gemm_internal::kStreamMaxRows ? m : m % kMr;
    if (rest > gemm_internal::kStreamMaxRows) rest = 0;
  } else if (m <= 3) {
    rest = m;
  }
  if (rest > 0) RunStreaming(pb, i1 - rest, i1, j0, j1);
  return i1 - rest;
}

// Computes rows [i0, i1) x columns [j0, j1) of C.
void RunRange(const Problem& pb, size_t i0, size_t i1, size_t j0, size_t j1) {
  i1 = StreamFewRows(pb, i0, i1, j0, j1);
  if (i1 == i0) return;
  const size_t m = i1 - i0;
  const size_t n = j1 - j0;
  const size_t k = pb.k;
  const bool direct_b = !pb.b_transposed && m <= kDirectBMaxRows;
  // Partial sums between K blocks live in C when C's old value is not needed
  // and alpha is 1; otherwise in a workspace.
  const bool in_place = pb.alpha == 1.0f && pb.beta == 0.0f;
  std::vector<float> workspace;
  float* w = pb.c + i0 * pb.ldc + j0;
  size_t ldw = pb.ldc;
  if (k > kKc && !in_place) {
    workspace.resize(m * n);
    w = workspace.data();
    ldw = n;
  }
  MicroKernel kernels[kMr + 1] = {nullptr};
  for (int r = 1; r <= kMr; ++r) {
    kernels[r] = pb.avx2 ? gemm_internal::Avx2MicroKernel(r)
                         : gemm_internal::PortableMicroKernel(r);
  }
  const size_t kc_max = std::min(k, kKc);
  AlignedBuffer ap = Allocate(std::min(m, kMc) * kc_max + kMr);
  // Packed B: the whole kc x nc block, or one edge panel in the direct mode.
  const size_t nc_max = std::min(((n + kNr - 1) / kNr) * kNr, kNc);
  AlignedBuffer bp = Allocate((direct_b ? kNr : nc_max) * kc_max);
  alignas(64) float tile[kMr * kNr];

  for (size_t jc = j0; jc < j1; jc += kNc) {
    const size_t nc = std::min(kNc, j1 - jc);
    for (size_t pc = 0; pc < k; pc += kKc) {
      const size_t kc = std::min(kKc, k - pc);
      const bool first = pc == 0;
      const bool last = pc + kc == k;
      if (!direct_b) {
        for (size_t jr = 0; jr < nc; jr += kNr) {
          const size_t cols = std::min<size_t>(kNr, nc - jr);
          float* dst = bp.get() + (jr / kNr) * kc * kNr;
          if (pb.b_transposed) {
            PackBTransposedPanel(pb.b + (jc + jr) * pb.ldb + pc, pb.ldb, kc,
                                 cols, dst, pb.avx2);
          } else {
            PackBPanel(pb.b + pc * pb.ldb + jc + jr, pb.ldb, kc, cols, dst);
          }
        }
      }
      for (size_t ic = i0; ic < i1; ic += kMc) {
        const size_t mc = std::min(kMc, i1 - ic);
        PackA(pb.a + ic * pb.lda + pc, pb.lda, mc, kc, ap.get());
        for (size_t jr = 0; jr < nc; jr += kNr) {
          const size_t cols = std::min<size_t>(kNr, nc - jr);
          const size_t j = jc + jr;
          const float* bpanel;
          size_t ldb_panel = kNr;
          if (!direct_b) {
            bpanel = bp.get() + (jr / kNr) * kc * kNr;
          } else if (cols == kNr) {
            bpanel = pb.b + pc * pb.ldb + j;
            ldb_panel = pb.ldb;
          } else {
            // Only one A block in direct mode, so this is packed once per pc.
            PackBPanel(pb.b + pc * pb.ldb + j, pb.ldb, kc, cols, bp.get());
            bpanel = bp.get();
          }
          for (size_t ir = 0; ir < mc; ir += kMr) {
            const size_t rows = std::min<size_t>(kMr, mc - ir);
            const size_t i = ic + ir;
            const float* apanel = ap.get() + ir * kc;
            float* wij = w + (i - i0) * ldw + (j - j0);
            float* cij = pb.c + i * pb.ldc + j;
            const float* in = nullptr;
            size_t ldi = kNr;
            if (!first) {
              if (cols == kNr) {
                in = wij;
                ldi = ldw;
              } else {
                for (size_t r = 0; r < rows; ++r) {
                  std::memcpy(tile + r * kNr, wij + r * ldw, cols * sizeof(float));
                  std::fill(tile + r * kNr + cols, tile + (r + 1) * kNr, 0.0f);
                }
                in = tile;
              }
            }
            MicroKernel kernel = kernels[rows];
            if (last) {
              if (cols == kNr && in_place) {
                kernel(kc, apanel, bpanel, ldb_panel, in, ldi, cij, pb.ldc);
              } else {
                kernel(kc, apanel, bpanel, ldb_panel, in, ldi, tile, kNr);
                Epilogue(tile, rows, cols, cij, pb.ldc, pb.alpha, pb.beta);
              }
            } else if (cols == kNr) {
              kernel(kc, apanel, bpanel, ldb_panel, in, ldi, wij, ldw);
            } else {
              kernel(kc, apanel, bpanel, ldb_panel, in, ldi, tile, kNr);
              for (size_t r = 0; r < rows; ++r) {
                std::memcpy(wij + r * ldw, tile + r * kNr, cols * sizeof(float));
              }
            }
          }
        }
      }
    }
  }
}

absl::Status Validate(size_t m, size_t n, size_t k, const float* a, size_t lda,
                      const float* b, size_t ldb, const float* c, size_t ldc,
                      const GemmOptions& o) {
  if (m == 0 || n == 0) return absl::OkStatus();
  if (c == nullptr) return absl::InvalidArgumentError("Gemm: C is null");
  if (ldc < n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: ldc (%d) must be >= N (%d)", ldc, n));
  }
  if (k == 0) return absl::OkStatus();
  if (a == nullptr || b == nullptr) {
    return absl::InvalidArgumentError("Gemm: A or B is null with K > 0");
  }
  if (lda < k) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Gemm: lda (%d) must be >= K (%d)", lda, k));
  }
  const size_t need = o.b_transposed ? k : n;
  if (ldb < need) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "Gemm: ldb (%d) must be >= %s (%d)%s", ldb, o.b_transposed ? "K" : "N",
        need, o.b_transposed ? " for transposed B" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(size_t m, size_t n, size_t k, const float* a, size_t lda,
                  const float* b, size_t ldb, float* c, size_t ldc,
                  const GemmOptions& options) {
  if (absl::Status s = Validate(m, n, k, a, lda, b, ldb, c, ldc, options);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<CpuPath> path = ResolveCpuPath(options.path);
  if (!path.ok()) return path.status();
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {  // S = +0 everywhere: only the epilogue remains.
    const float zero_row[kNr] = {};
    for (size_t i = 0; i < m; ++i) {
      for (size_t j = 0; j < n; j += kNr) {
        Epilogue(zero_row, 1, std::min<size_t>(kNr, n - j), c + i * ldc + j, ldc,
                 options.alpha, options.beta);
      }
    }
    return absl::OkStatus();
  }
  const Problem pb{k,  a,   lda,           b,            ldb,
                   options.b_transposed, c, ldc, options.alpha, options.beta,
                   *path == CpuPath::kAvx2};
  // Split the output into per-thread ranges: by 16-column panels when there are
  // enough, else by 6-row panels. Any split computes the same chains.
  const size_t col_units = (n + kNr - 1) / kNr;
  const size_t row_units = (m + kMr - 1) / kMr;
  const bool by_cols = col_units >= row_units || col_units >= 4 * static_cast<size_t>(options.num_threads);
  const size_t units = by_cols ? col_units : row_units;
  const size_t threads = std::clamp<size_t>(
      options.num_threads < 1 ? 1 : static_cast<size_t>(options.num_threads), 1,
      units);
  auto run_part = [&](size_t t) {
    const size_t u0 = units * t / threads;
    const size_t u1 = units * (t + 1) / threads;
    if (by_cols) {
      RunRange(pb, 0, m, u0 * kNr, std::min(n, u1 * kNr));
    } else {
      RunRange(pb, u0 * kMr, std::min(m, u1 * kMr), 0, n);
    }
  };
  std::vector<std::thread> workers;
  size_t inline_from = threads;
  for (size_t t = 1; t < threads; ++t) {
    try {
      workers.emplace_back(run_part, t);
    } catch (const std::system_error&) {
      inline_from = t;  // Could not start a thread: do the rest here.
      break;
    }
  }
  run_part(0);
  for (size_t t = inline_from; t < threads; ++t) run_part(t);
  for (std::thread& th : workers) th.join();
  return absl::OkStatus();
}

namespace gemm_internal {
namespace {

template <int R>
void PortableKernel(size_t kc, const float* a, const float* b, size_t ldb,
                    const float* in, size_t ldi, float* out, size_t ldo) {
  float acc[R][kNr];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < kNr; ++j) acc[r][j] = in ? in[r * ldi + j] : 0.0f;
  }
  for (size_t p = 0; p < kc; ++p) {
    const float* bp = b + p * ldb;
    for (int r = 0; r < R; ++r) {
      const float av = a[p * R + r];
      for (int j = 0; j < kNr; ++j) acc[r][j] = std::fma(av, bp[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < kNr; ++j) out[r * ldo + j] = acc[r][j];
  }
}

}  // namespace

MicroKernel PortableMicroKernel(int rows) {
  switch (rows) {
    case 1:
      return PortableKernel<1>;
    case 2:
      return PortableKernel<2>;
    case 3:
      return PortableKernel<3>;
    case 4:
      return PortableKernel<4>;
    case 5:
      return PortableKernel<5>;
    default:
      return PortableKernel<6>;
  }
}

}  // namespace gemm_internal
}  // namespace densegate::kernels
