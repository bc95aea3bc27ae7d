#include "runtime/bench_flags.h"

#include <functional>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "runtime/status_macros.h"

namespace densegate::runtime {
namespace {

struct Flag {
  const char* name;
  const char* help;
  std::function<absl::Status(absl::string_view)> set;
};

absl::Status BadValue(absl::string_view flag, absl::string_view value,
                      absl::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrCat("flag --", flag, ": bad value \"", value, "\" (expected ",
                   expected, ")"));
}

// An integer flag in [min, max].
std::function<absl::Status(absl::string_view)> IntIn(const char* name, int* out,
                                                     int min, int max) {
  return [=](absl::string_view v) {
    int x;
    if (!absl::SimpleAtoi(v, &x) || x < min || x > max) {
      return BadValue(name, v,
                      absl::StrFormat("an integer in [%d, %d]", min, max));
    }
    *out = x;
    return absl::OkStatus();
  };
}

// Wraps a parser returning StatusOr<T>, prefixing its message with the flag.
template <typename T, typename Parse>
std::function<absl::Status(absl::string_view)> Parsed(const char* name, T* out,
                                                      Parse parse) {
  return [=](absl::string_view v) -> absl::Status {
    absl::StatusOr<T> x = parse(v);
    if (!x.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("flag --", name, ": ", x.status().message()));
    }
    *out = *x;
    return absl::OkStatus();
  };
}

absl::StatusOr<CompareMode> ParseCompare(absl::string_view v) {
  if (v == "none") return CompareMode::kNone;
  if (v == "modes") return CompareMode::kModes;
  if (v == "batch") return CompareMode::kBatch;
  if (v == "kv_formats") return CompareMode::kKvFormats;
  if (v == "all") return CompareMode::kAll;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown comparison \"", v,
                   "\": expected none, modes, batch, kv_formats or all"));
}

std::vector<Flag> MakeFlags(BenchFlags* f) {
  constexpr int kMax = std::numeric_limits<int>::max();
  EngineOptions* e = &f->engine;
  DatasetOptions* d = &f->dataset;
  return {
      {"config", "model config JSON (default runtime/configs/bench.json)",
       [f](absl::string_view v) {
         f->config = std::string(v);
         return absl::OkStatus();
       }},
      {"mode", "epd | colocated (default epd)",
       Parsed("mode", &e->mode, ParseEngineMode)},
      {"kv_format", "fp32 | bf16 | fp8_e4m3 | fp8_e5m2 | int8 (default fp32)",
       Parsed("kv_format", &e->kv_format, kernels::ParseKvFormat)},
      {"kv_scale_dtype", "int8 scale/zero-point storage: fp32 | fp16",
       Parsed("kv_scale_dtype", &e->kv_scale_dtype, kernels::ParseScaleDtype)},
      {"encode_workers", "EPD encode threads (default 1)",
       IntIn("encode_workers", &e->encode_workers, 1, 256)},
      {"prefill_workers", "EPD prefill threads (default 1)",
       IntIn("prefill_workers", &e->prefill_workers, 1, 256)},
      {"transfer_workers", "EPD transfer threads (default 1)",
       IntIn("transfer_workers", &e->transfer_workers, 1, 256)},
      {"decode_workers", "EPD decode threads (default 1)",
       IntIn("decode_workers", &e->decode_workers, 1, 256)},
      {"colocated_workers", "colocated threads (default 1)",
       IntIn("colocated_workers", &e->colocated_workers, 1, 256)},
      {"max_batch_size", "sequences per decode batch (default 8)",
       IntIn("max_batch_size", &e->max_batch_size, 1, 4096)},
      {"token_budget", "tokens per forward pass (default 256)",
       IntIn("token_budget", &e->token_budget, 1, kMax)},
      {"kv_cache_tokens", "tokens per KV cache (default: see EngineOptions)",
       IntIn("kv_cache_tokens", &e->kv_cache_tokens, 0, kMax)},
      {"kv_cache_kib", "KV memory budget of each cache in KiB, instead of "
                       "kv_cache_tokens: denser formats hold more tokens",
       IntIn("kv_cache_kib", &e->kv_cache_kib, 0, kMax)},
      {"kda_variant", "KDA decode kernel: naive | fused | tiled",
       Parsed("kda_variant", &f->model.kda_variant,
              kernels::kda::ParseKdaDecodeVariant)},
      {"kda_precision", "KDA dot products: ieee | tf32 | tf32_rna | tf32x3",
       Parsed("kda_precision", &f->model.kda_precision,
              kernels::kda::ParsePrecision)},
      {"num_prompts", "requests in the dataset (default 64)",
       IntIn("num_prompts", &d->num_prompts, 1, kMax)},
      {"input_len", "max input length (default 256)",
       IntIn("input_len", &d->input_len, 1, kMax)},
      {"output_len", "max output length (default 128)",
       IntIn("output_len", &d->output_len, 1, kMax)},
      {"range_ratio", "lengths drawn from [len * ratio, len], ratio in (0, 1]",
       [d](absl::string_view v) {
         double x;
         if (!absl::SimpleAtod(v, &x) || !(x > 0 && x <= 1)) {
           return BadValue("range_ratio", v, "a number in (0, 1]");
         }
         d->range_ratio = x;
         return absl::OkStatus();
       }},
      {"request_rate", "Poisson arrivals per second; inf = all at once",
       [d](absl::string_view v) {
         double x;
         if (!absl::SimpleAtod(v, &x) || !(x > 0)) {
           return BadValue("request_rate", v, "a positive number or inf");
         }
         d->request_rate = x;
         return absl::OkStatus();
       }},
      {"seed", "dataset seed (default 0)",
       [d](absl::string_view v) {
         if (!absl::SimpleAtoi(v, &d->seed)) {
           return BadValue("seed", v, "a non-negative integer");
         }
         return absl::OkStatus();
       }},
      {"trace", "write a Chrome trace-event JSON (Perfetto) to this file",
       [f](absl::string_view v) {
         if (v.empty()) return BadValue("trace", v, "a file path");
         f->trace = std::string(v);
         return absl::OkStatus();
       }},
      {"log_level", "debug | info | warning | error | off (default warning)",
       Parsed("log_level", &f->log_level, ParseLogLevel)},
      {"compare", "none | modes | batch | kv_formats | all: run the pairs",
       Parsed("compare", &f->compare, ParseCompare)},
      {"rounds",
       "--compare modes/batch: run each pair this many times, alternating "
       "the order; the ratio reported is the median (default 1)",
       IntIn("rounds", &f->rounds, 1, 100)},
  };
}

}  // namespace

absl::StatusOr<BenchFlags> ParseBenchFlags(
    const std::vector<std::string>& args) {
  BenchFlags flags;
  flags.dataset.request_rate = std::numeric_limits<double>::infinity();
  const std::vector<Flag> table = MakeFlags(&flags);
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      flags.help = true;
      continue;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected argument \"", arg, "\": flags look like --name=value"));
    }
    absl::string_view name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : table) {
      if (name == f.name) flag = &f;
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown flag --", name, " (run with --help for the list)"));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    RT_RETURN_IF_ERROR(flag->set(value));
  }
  return flags;
}

std::string BenchUsage() {
  BenchFlags unused;
  std::string out =
      "serve_bench: serving benchmark of the densegate runtime.\n"
      "Runs a random dataset through the engine in-process and prints JSON\n"
      "(throughput, TTFT, TPOT, ITL, peak KV memory, per-stage counters).\n"
      "Exit codes: 0 ok, 1 run failed, 2 bad flags or config.\n\nFlags:\n";
  for (const Flag& f : MakeFlags(&unused)) {
    absl::StrAppendFormat(&out, "  --%-18s %s\n", f.name, f.help);
  }
  return out;
}

}  // namespace densegate::runtime
