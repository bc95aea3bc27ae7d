#include "runtime/bench_runner.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "runtime/status_macros.h"

namespace densegate::runtime {
namespace {

class Collector : public RequestObserver {
 public:
  void OnFinished(RequestResult result) override {
    absl::MutexLock lock(&mu_);
    results_.push_back(std::move(result));
  }
  std::vector<RequestResult> Take() {
    absl::MutexLock lock(&mu_);
    return std::move(results_);
  }

 private:
  absl::Mutex mu_;
  std::vector<RequestResult> results_ ABSL_GUARDED_BY(mu_);
};

nlohmann::json ConfigJson(const HybridModel& model, const EngineOptions& e,
                          const std::vector<BenchRequest>& dataset) {
  const ModelConfig& c = model.config();
  nlohmann::json j;
  j["model"] = {{"name", c.name},
                {"parameters", model.weights().NumParameters()},
                {"layers", c.num_layers()},
                {"kda_layers", c.num_kda_layers()},
                {"attention_layers", c.num_attention_layers()},
                {"hidden_size", c.hidden_size},
                {"vocab_size", c.vocab_size}};
  const bool epd = e.mode == EngineMode::kEpd;
  j["engine"] = {{"mode", EngineModeName(e.mode)},
                 {"kv_format", kernels::KvFormatName(e.kv_format)},
                 {"kv_scale_dtype", kernels::ScaleDtypeName(e.kv_scale_dtype)},
                 {"max_batch_size", e.max_batch_size},
                 {"token_budget", e.token_budget},
                 {"kv_cache_tokens", e.kv_cache_tokens},
                 {"kv_cache_kib", e.kv_cache_kib},
                 {"kda_variant", kernels::kda::KdaDecodeVariantName(
                                     model.options().kda_variant)},
                 {"kda_precision",
                  kernels::kda::PrecisionName(model.options().kda_precision)}};
  if (epd) {
    j["engine"]["encode_workers"] = e.encode_workers;
    j["engine"]["prefill_workers"] = e.prefill_workers;
    j["engine"]["transfer_workers"] = e.transfer_workers;
    j["engine"]["decode_workers"] = e.decode_workers;
    j["engine"]["compute_threads"] = e.prefill_workers + e.decode_workers;
  } else {
    j["engine"]["colocated_workers"] = e.colocated_workers;
    j["engine"]["compute_threads"] = e.colocated_workers;
  }
  j["dataset"] = {{"num_prompts", dataset.size()}};
  return j;
}

nlohmann::json MemoryJson(const MemoryReport& m) {
  return {{"peak_kv_bytes", m.total_peak_bytes},
          {"peak_attention_kv_bytes", m.attention_kv_peak_bytes},
          {"peak_kda_state_bytes", m.kda_state_peak_bytes},
          {"attention_kv_bytes_per_token", m.kv_bytes_per_token},
          {"kv_block_bytes", m.kv_block_bytes},
          {"kda_state_bytes_per_request", m.kda_state_bytes_per_request}};
}

nlohmann::json StagesJson(const StageStats& stats) {
  nlohmann::json j;
  for (const auto& [name, value] : stats.Snapshot()) {
    if (absl::EndsWith(name, "_ns")) {
      j[absl::StrCat(name.substr(0, name.size() - 3), "_ms")] = value / 1e6;
    } else {
      j[name] = value;
    }
  }
  const double decode_ns = stats.decode_ns.load();
  const double steps = stats.decode_steps.load();
  j["transfer_over_decode_time"] =
      decode_ns > 0 ? stats.transfer_ns.load() / decode_ns : 0.0;
  j["mean_decode_batch"] = steps > 0 ? stats.decode_rows.load() / steps : 0.0;
  // Tokens per second of decode-step time: the decode kernels' throughput
  // without queueing or prefill.
  j["decode_step_tokens_per_s"] =
      decode_ns > 0 ? stats.decode_rows.load() / decode_ns * 1e9 : 0.0;
  return j;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

// CPU seconds (user + system) this process has used: with the wall time,
// how many cores the run actually got on a shared machine.
double ProcessCpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

// The 1-minute load average (other processes competing for the cores).
double LoadAverage() {
  double load = 0;
  return getloadavg(&load, 1) == 1 ? load : -1;
}

}  // namespace

absl::StatusOr<BenchRun> RunServeBench(
    const HybridModel& model, const EngineOptions& engine_options,
    const std::vector<BenchRequest>& dataset) {
  Collector collector;
  RT_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                      Engine::Create(&model, engine_options, &collector));
  const Clock* clock = engine_options.clock;
  const double load_at_start = LoadAverage();
  const double cpu_at_start = ProcessCpuSeconds();
  const int64_t start_ns = clock->NowNanos();
  for (const BenchRequest& r : dataset) {
    const int64_t due_ns = start_ns + static_cast<int64_t>(r.arrival_s * 1e9);
    const int64_t wait_ns = due_ns - clock->NowNanos();
    // The submitting thread paces arrivals (Poisson); requests run on the
    // engine's threads meanwhile.
    if (wait_ns > 0)
      std::this_thread::sleep_for(std::chrono::nanoseconds(wait_ns));
    Request request = r.request;
    request.arrival_ns = clock->NowNanos();
    engine->Submit(std::move(request));
  }
  engine->WaitIdle();
  const int64_t end_ns = clock->NowNanos();
  const double cpu_s = ProcessCpuSeconds() - cpu_at_start;
  BenchRun run;
  std::vector<RequestResult> results = collector.Take();
  run.metrics = ComputeServingMetrics(results, start_ns, end_ns);
  // What each request generated, in request order (null for a failed one):
  // a harness compares these between two builds on the same prompts.
  std::sort(results.begin(), results.end(),
            [](const RequestResult& a, const RequestResult& b) { return a.id < b.id; });
  nlohmann::json outputs = nlohmann::json::array();
  for (const RequestResult& r : results) {
    outputs.push_back(r.status.ok() ? nlohmann::json(r.tokens) : nlohmann::json(nullptr));
  }
  run.memory = engine->Memory();
  run.json = ServingMetricsToJson(run.metrics);
  run.json["config"] = ConfigJson(model, engine_options, dataset);
  run.json["memory"] = MemoryJson(run.memory);
  run.json["stages"] = StagesJson(engine->stats());
  run.json["outputs"] = std::move(outputs);
  if (engine_options.logger != nullptr) {
    engine_options.logger->Log(
        LogLevel::kInfo, "run_finished",
        {{"mode", EngineModeName(engine_options.mode)},
         {"kv_format", kernels::KvFormatName(engine_options.kv_format)},
         {"max_batch_size", engine_options.max_batch_size},
         {"completed", run.metrics.completed},
         {"failed", run.metrics.failed},
         {"output_throughput", run.metrics.output_throughput},
         {"duration_s", run.metrics.duration_s},
         {"cpu_s", cpu_s}});
  }
  run.json["host"] = {
      {"cpu_s", cpu_s},
      {"cores_used",
       run.metrics.duration_s > 0 ? cpu_s / run.metrics.duration_s : 0.0},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"load_average_1m_at_start", load_at_start}};
  return run;
}

namespace {

// A pair of runs of the same dataset, `rounds` times with the order
// alternating (a b, b a, a b, ...).
struct PairRounds {
  std::vector<BenchRun> a, b;
  std::vector<double> ratios;  // metric(a) / metric(b), per round.
  size_t median_round = 0;     // The round whose ratio is the median.
};

absl::StatusOr<PairRounds> RunPair(
    const HybridModel& model, const EngineOptions& a, const EngineOptions& b,
    const std::vector<BenchRequest>& dataset, int rounds,
    double (*metric)(const BenchRun&)) {
  PairRounds p;
  for (int r = 0; r < rounds; ++r) {
    const bool a_first = r % 2 == 0;
    RT_ASSIGN_OR_RETURN(BenchRun first,
                        RunServeBench(model, a_first ? a : b, dataset));
    RT_ASSIGN_OR_RETURN(BenchRun second,
                        RunServeBench(model, a_first ? b : a, dataset));
    p.a.push_back(std::move(a_first ? first : second));
    p.b.push_back(std::move(a_first ? second : first));
    p.ratios.push_back(Ratio(metric(p.a.back()), metric(p.b.back())));
  }
  std::vector<size_t> order(p.ratios.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t x, size_t y) { return p.ratios[x] < p.ratios[y]; });
  p.median_round = order[(order.size() - 1) / 2];
  return p;
}

double OutputThroughput(const BenchRun& r) {
  return r.metrics.output_throughput;
}

// metric(run) of each round's run, in round order: with the ratios, shows
// whether a round's outlier came from one side.
std::vector<double> MetricRounds(const std::vector<BenchRun>& runs,
                                 double (*metric)(const BenchRun&)) {
  std::vector<double> values;
  for (const BenchRun& r : runs) values.push_back(metric(r));
  return values;
}

double DecodeStepThroughput(const BenchRun& r) {
  return r.json["stages"]["decode_step_tokens_per_s"].get<double>();
}

}  // namespace

absl::StatusOr<nlohmann::json> RunComparison(
    const HybridModel& model, const BenchFlags& flags,
    const std::vector<BenchRequest>& dataset) {
  const CompareMode c = flags.compare;
  const bool all = c == CompareMode::kAll;
  nlohmann::json out;
  if (all || c == CompareMode::kModes) {
    EngineOptions epd = flags.engine;
    epd.mode = EngineMode::kEpd;
    EngineOptions colocated = flags.engine;
    colocated.mode = EngineMode::kColocated;
    colocated.colocated_workers = epd.prefill_workers + epd.decode_workers;
    // Equal decode slots too: every colocated worker keeps a batch of
    // max_batch_size, so the decode pool gets their sum (rounded up to a
    // whole batch per decode worker). With the per-worker
    // size instead, EPD would decode half as many sequences at once on 1+1
    // threads and pay each step's weight streaming for half the tokens.
    epd.max_batch_size =
        (colocated.colocated_workers * flags.engine.max_batch_size +
         epd.decode_workers - 1) /
        epd.decode_workers;
    RT_ASSIGN_OR_RETURN(PairRounds p,
                        RunPair(model, epd, colocated, dataset, flags.rounds,
                                &OutputThroughput));
    const BenchRun& a = p.a[p.median_round];
    out["modes"] = {
        {"epd", a.json},
        {"colocated", p.b[p.median_round].json},
        {"epd_decode_batch_size",
         std::min(epd.max_batch_size, epd.token_budget)},
        {"epd_over_colocated_output_throughput", p.ratios[p.median_round]},
        {"epd_over_colocated_output_throughput_rounds", p.ratios},
        {"output_throughput_rounds",
         {{"epd", MetricRounds(p.a, &OutputThroughput)},
          {"colocated", MetricRounds(p.b, &OutputThroughput)}}},
        {"epd_transfer_over_decode_time",
         a.json["stages"]["transfer_over_decode_time"]}};
  }
  if (all || c == CompareMode::kBatch) {
    EngineOptions one = flags.engine;
    one.max_batch_size = 1;
    RT_ASSIGN_OR_RETURN(PairRounds p,
                        RunPair(model, flags.engine, one, dataset,
                                flags.rounds, &OutputThroughput));
    const BenchRun& batch_n = p.a[p.median_round];
    const BenchRun& batch_1 = p.b[p.median_round];
    const std::string n = absl::StrCat(flags.engine.max_batch_size);
    out["batch"] = {
        {"batch_1", batch_1.json},
        {absl::StrCat("batch_", n), batch_n.json},
        {absl::StrCat("output_throughput_batch_", n, "_over_1"),
         p.ratios[p.median_round]},
        {absl::StrCat("output_throughput_batch_", n, "_over_1_rounds"),
         p.ratios},
        {absl::StrCat("decode_step_throughput_batch_", n, "_over_1"),
         Ratio(DecodeStepThroughput(batch_n), DecodeStepThroughput(batch_1))}};
  }
  if (all || c == CompareMode::kKvFormats) {
    using kernels::KvFormat;
    nlohmann::json runs, vs_fp32, vs_bf16, per_token_vs_fp32, per_token_vs_bf16;
    std::vector<std::pair<KvFormat, BenchRun>> results;
    for (KvFormat f : {KvFormat::kFp32, KvFormat::kBf16, KvFormat::kFp8E4M3,
                       KvFormat::kFp8E5M2, KvFormat::kInt8}) {
      EngineOptions e = flags.engine;
      e.kv_format = f;
      RT_ASSIGN_OR_RETURN(BenchRun r, RunServeBench(model, e, dataset));
      results.emplace_back(f, std::move(r));
    }
    const MemoryReport& fp32 = results[0].second.memory;
    const MemoryReport& bf16 = results[1].second.memory;
    for (const auto& [f, r] : results) {
      const std::string name(kernels::KvFormatName(f));
      runs[name] = r.json;
      vs_fp32[name] =
          Ratio(r.memory.attention_kv_peak_bytes, fp32.attention_kv_peak_bytes);
      vs_bf16[name] =
          Ratio(r.memory.attention_kv_peak_bytes, bf16.attention_kv_peak_bytes);
      per_token_vs_fp32[name] =
          Ratio(r.memory.kv_bytes_per_token, fp32.kv_bytes_per_token);
      per_token_vs_bf16[name] =
          Ratio(r.memory.kv_bytes_per_token, bf16.kv_bytes_per_token);
    }
    out["kv_formats"] = {{"runs", runs},
                         {"peak_attention_kv_vs_fp32", vs_fp32},
                         {"peak_attention_kv_vs_bf16", vs_bf16},
                         {"bytes_per_token_vs_fp32", per_token_vs_fp32},
                         {"bytes_per_token_vs_bf16", per_token_vs_bf16}};
  }
  return out;
}

}  // namespace densegate::runtime
