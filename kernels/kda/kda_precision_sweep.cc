// kda_precision_sweep: long-context precision of the fp32 KDA kernels
// against the fp64 reference recurrence.
//
// One random sequence (q, k, v ~ randn; beta = sigmoid(randn);
// g = logsigmoid(randn) / gate_scale) is run through the fp64 token-by-token
// recurrence and through an fp32 path at each requested input precision.
// For each length L it reports the output error over the `window` tokens
// before L (rel_rms = RMS(out - ref) / RMS(ref), and the elementwise max
// absolute error) and the error of the state after L tokens, as one JSON
// object per line on stdout. Progress goes to stderr.
//
// Paths: decode (the tiled decode kernel, token by token), prefill (chunked,
// per-chunk cumulative sum; a fresh prefill of L tokens for each L) and
// prefill_global_cumsum (the same with one global cumulative sum: the
// failure class the sweep exists to catch).
//
// Exit codes: 0 ok, 2 bad flags, 1 a kernel error.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kernels/kda/kda_prefill.h"
#include "kernels/kda/kda_testing.h"
#include "kernels/kda/precision.h"
#include "nlohmann/json.hpp"

namespace densegate::kernels::kda {
namespace {

constexpr char kUsage[] =
    R"(usage: kda_precision_sweep [flags]

Long-context precision of the fp32 KDA kernels vs the fp64 recurrence.
Prints one JSON object per (path, gate_scale, precision, length) line:
{length, precision, path, gate_scale, rel_rms, max_err, state_rel_rms,
 state_max_err, ...}; rel_rms/max_err are over the `window` output tokens
before each length, state_* compare the state after `length` tokens.

flags (--name=value or --name value):
  --lengths      comma list of sequence lengths    (1024,4096,16384,65536)
  --precisions   comma list of ieee,tf32,tf32_rna,tf32x3     (all four)
  --path         decode | prefill | prefill_global_cumsum, or a comma list
                                                              (decode)
  --gate_scale   g = logsigmoid(randn) / S; large S = long memory; comma
                 list allowed                                 (10)
  --k, --v       key / value head dims, 1..256                (64, 64)
  --heads        heads                                        (1)
  --seed         input seed                                   (1)
  --window       output tokens per error window               (256)
  --chunk        prefill chunk size                           (64)
  --threads      threads over heads (0 = all)                 (1)
  --help         this text
)";

struct Flags {
  std::vector<int64_t> lengths = {1024, 4096, 16384, 65536};
  std::vector<Precision> precisions = {Precision::kIeee, Precision::kTf32,
                                       Precision::kTf32Rna, Precision::kTf32x3};
  std::vector<std::string> paths = {"decode"};
  std::vector<double> gate_scales = {10.0};
  int k = 64;
  int v = 64;
  int heads = 1;
  uint64_t seed = 1;
  int64_t window = 256;
  int chunk = 64;
  int threads = 1;
};

[[noreturn]] void UsageError(const std::string& msg) {
  std::fprintf(stderr, "kda_precision_sweep: %s\n\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

template <typename T>
std::vector<T> ParseList(absl::string_view flag, absl::string_view value,
                         bool (*parse)(absl::string_view, T*)) {
  std::vector<T> out;
  for (absl::string_view item : absl::StrSplit(value, ',')) {
    T x;
    if (item.empty() || !parse(item, &x)) {
      UsageError(absl::StrFormat("--%s: cannot parse \"%s\" in \"%s\"", flag,
                                 item, value));
    }
    out.push_back(x);
  }
  return out;
}

bool ParseInt64(absl::string_view s, int64_t* x) {
  return absl::SimpleAtoi(s, x);
}
bool ParseDouble(absl::string_view s, double* x) {
  return absl::SimpleAtod(s, x);
}
bool ParsePrec(absl::string_view s, Precision* p) {
  auto r = ParsePrecision(s);
  if (!r.ok()) return false;
  *p = *r;
  return true;
}
bool ParsePath(absl::string_view s, std::string* p) {
  if (s != "decode" && s != "prefill" && s != "prefill_global_cumsum") {
    return false;
  }
  *p = std::string(s);
  return true;
}

int ParseIntFlag(absl::string_view flag, absl::string_view value, int lo,
                 int hi) {
  int x;
  if (!absl::SimpleAtoi(value, &x) || x < lo || x > hi) {
    UsageError(
        absl::StrFormat("--%s: expected an integer in [%d, %d], got "
                        "\"%s\"",
                        flag, lo, hi, value));
  }
  return x;
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (arg.substr(0, 2) != "--") {
      UsageError(absl::StrFormat("unexpected argument \"%s\"", arg));
    }
    arg.remove_prefix(2);
    std::string name, value;
    const size_t eq = arg.find('=');
    if (eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
    } else {
      name = std::string(arg);
      if (i + 1 >= argc) UsageError("--" + name + " needs a value");
      value = argv[++i];
    }
    if (name == "lengths") {
      f.lengths = ParseList<int64_t>(name, value, &ParseInt64);
      for (int64_t l : f.lengths) {
        if (l < 1) UsageError("--lengths: lengths must be >= 1");
      }
    } else if (name == "precisions") {
      f.precisions = ParseList<Precision>(name, value, &ParsePrec);
    } else if (name == "path") {
      f.paths = ParseList<std::string>(name, value, &ParsePath);
    } else if (name == "gate_scale") {
      f.gate_scales = ParseList<double>(name, value, &ParseDouble);
      for (double s : f.gate_scales) {
        if (!(s > 0)) UsageError("--gate_scale: must be > 0");
      }
    } else if (name == "k") {
      f.k = ParseIntFlag(name, value, 1, kKdaMaxDim);
    } else if (name == "v") {
      f.v = ParseIntFlag(name, value, 1, kKdaMaxDim);
    } else if (name == "heads") {
      f.heads = ParseIntFlag(name, value, 1, 1 << 16);
    } else if (name == "seed") {
      int64_t s;
      if (!absl::SimpleAtoi(value, &s)) UsageError("--seed: not an integer");
      f.seed = static_cast<uint64_t>(s);
    } else if (name == "window") {
      f.window = ParseIntFlag(name, value, 1, 1 << 30);
    } else if (name == "chunk") {
      f.chunk = ParseIntFlag(name, value, 1, kKdaMaxChunk);
    } else if (name == "threads") {
      f.threads = ParseIntFlag(name, value, 0, 4096);
    } else {
      UsageError(absl::StrFormat("unknown flag --%s", name));
    }
  }
  std::sort(f.lengths.begin(), f.lengths.end());
  f.lengths.erase(std::unique(f.lengths.begin(), f.lengths.end()),
                  f.lengths.end());
  return f;
}

// Inputs offset to token t (token-major layout).
template <typename T>
KdaInputs<T> At(const KdaInputs<T>& in, const KdaDims& dims, int64_t t) {
  KdaInputs<T> r = in;
  const int64_t hk = static_cast<int64_t>(dims.heads) * dims.k_dim;
  r.q += t * hk;
  r.k += t * hk;
  r.g += t * hk;
  r.v += t * static_cast<int64_t>(dims.heads) * dims.v_dim;
  r.beta += t * dims.heads;
  return r;
}

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
      .count();
}

void Fail(const absl::Status& s) {
  std::fprintf(stderr, "kda_precision_sweep: %s\n", s.ToString().c_str());
  std::exit(1);
}

void SweepOneScale(const Flags& f, double gate_scale) {
  const int64_t max_len = f.lengths.back();
  const KdaDims all{static_cast<int>(max_len), f.heads, f.k, f.v};
  const int64_t hv = static_cast<int64_t>(f.heads) * f.v;
  const int64_t state_n = static_cast<int64_t>(f.heads) * f.k * f.v;
  auto t0 = std::chrono::steady_clock::now();
  testing::RandomInputOptions gen;
  gen.gate_scale = gate_scale;
  const testing::KdaHostInputs in = testing::MakeRandomInputs(all, f.seed, gen);

  // fp64 reference: outputs of every token, state after each length.
  std::vector<double> ref_out(max_len * hv);
  std::vector<std::vector<double>> ref_states;
  {
    std::vector<double> st(state_n, 0.0);
    int64_t done = 0;
    for (int64_t len : f.lengths) {
      const KdaDims seg{static_cast<int>(len - done), f.heads, f.k, f.v};
      if (auto s = KdaRecurrenceReference(seg, At(in.D(), all, done), st.data(),
                                          ref_out.data() + done * hv, {});
          !s.ok()) {
        Fail(s);
      }
      done = len;
      ref_states.push_back(st);
      std::fprintf(stderr,
                   "[sweep] gate_scale=%g reference: %lld tokens, %.1fs\n",
                   gate_scale, static_cast<long long>(done), Seconds(t0));
    }
  }

  for (const std::string& path : f.paths) {
    for (Precision p : f.precisions) {
      KdaPrefillOptions o;
      o.math.precision = p;
      o.chunk_size = f.chunk;
      o.num_threads = f.threads;
      o.variant = path == "decode"    ? KdaPrefillVariant::kRecurrent
                  : path == "prefill" ? KdaPrefillVariant::kChunked
                                      : KdaPrefillVariant::kGlobalCumsum;
      std::vector<float> out(max_len * hv);
      std::vector<float> st(state_n, 0.0f);
      int64_t done = 0;
      for (size_t li = 0; li < f.lengths.size(); ++li) {
        const int64_t len = f.lengths[li];
        auto t1 = std::chrono::steady_clock::now();
        if (o.variant == KdaPrefillVariant::kRecurrent) {
          // Decode continues token by token: extend the running sequence.
          const KdaDims seg{static_cast<int>(len - done), f.heads, f.k, f.v};
          if (auto s = KdaPrefill(seg, At(in.F(), all, done), st.data(),
                                  out.data() + done * hv, o);
              !s.ok()) {
            Fail(s);
          }
          done = len;
        } else {
          // A prefill of `len` tokens from an empty state (the global
          // cumulative sum starts at the first token).
          std::fill(st.begin(), st.end(), 0.0f);
          const KdaDims seg{static_cast<int>(len), f.heads, f.k, f.v};
          if (auto s = KdaPrefill(seg, in.F(), st.data(), out.data(), o);
              !s.ok()) {
            Fail(s);
          }
        }
        const int64_t w = std::min(f.window, len);
        const int64_t first = (len - w) * hv;
        const testing::ErrorStats oe = testing::CompareToReference(
            out.data() + first, ref_out.data() + first, w * hv);
        const testing::ErrorStats se = testing::CompareToReference(
            st.data(), ref_states[li].data(), state_n);
        nlohmann::json j;
        j["length"] = len;
        j["precision"] = std::string(PrecisionName(p));
        j["path"] = path;
        j["gate_scale"] = gate_scale;
        j["rel_rms"] = oe.rel_rms;
        j["max_err"] = oe.max_abs_err;
        j["max_rel_err"] = oe.max_rel_err;
        j["state_rel_rms"] = se.rel_rms;
        j["state_max_err"] = se.max_abs_err;
        j["window"] = w;
        j["k"] = f.k;
        j["v"] = f.v;
        j["heads"] = f.heads;
        j["seed"] = f.seed;
        j["seconds"] = Seconds(t1);
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
        std::fprintf(stderr,
                     "[sweep] %s %s L=%lld rel_rms=%.3g (%.1fs total)\n",
                     path.c_str(), std::string(PrecisionName(p)).c_str(),
                     static_cast<long long>(len), oe.rel_rms, Seconds(t0));
      }
    }
  }
}

}  // namespace
}  // namespace densegate::kernels::kda

int main(int argc, char** argv) {
  using namespace densegate::kernels::kda;
  const Flags f = ParseFlags(argc, argv);
  for (double s : f.gate_scales) SweepOneScale(f, s);
  return 0;
}
