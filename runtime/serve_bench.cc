// serve_bench: the runtime's serving benchmark. See bench_flags.h for the
// flags (or run with --help) and README.md for the measured numbers.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "runtime/bench_dataset.h"
#include "runtime/bench_flags.h"
#include "runtime/bench_runner.h"
#include "runtime/clock.h"
#include "runtime/hybrid_model.h"
#include "runtime/logger.h"
#include "runtime/model_config.h"
#include "runtime/tracer.h"

namespace densegate::runtime {
namespace {

constexpr int kExitRunFailed = 1;
constexpr int kExitUsage = 2;

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "serve_bench: %s\n",
               std::string(status.message()).c_str());
  return code;
}

int Main(int argc, char** argv) {
  absl::StatusOr<BenchFlags> flags =
      ParseBenchFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags.ok()) return Fail(kExitUsage, flags.status());
  if (flags->help) {
    std::fputs(BenchUsage().c_str(), stdout);
    return 0;
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(flags->config);
  if (!config.ok()) return Fail(kExitUsage, config.status());
  flags->dataset.vocab_size = config->vocab_size;
  absl::StatusOr<std::vector<BenchRequest>> dataset =
      MakeRandomDataset(flags->dataset);
  if (!dataset.ok()) return Fail(kExitUsage, dataset.status());
  if (absl::Status s = ValidateEngineOptions(flags->engine); !s.ok()) {
    return Fail(kExitUsage, s);
  }

  const Clock* clock = SteadyClock::Get();
  Logger logger(flags->log_level, clock);
  std::unique_ptr<Tracer> tracer;
  if (!flags->trace.empty()) tracer = std::make_unique<Tracer>(clock);
  flags->engine.clock = clock;
  flags->engine.logger = &logger;
  flags->engine.tracer = tracer.get();

  absl::StatusOr<std::unique_ptr<HybridModel>> model =
      HybridModel::Create(*config, flags->model);
  if (!model.ok()) return Fail(kExitUsage, model.status());
  logger.Log(LogLevel::kInfo, "model_ready",
             {{"config", flags->config},
              {"parameters", (*model)->weights().NumParameters()}});

  nlohmann::json report;
  if (flags->compare == CompareMode::kNone) {
    absl::StatusOr<BenchRun> run =
        RunServeBench(**model, flags->engine, *dataset);
    if (!run.ok()) return Fail(kExitRunFailed, run.status());
    report = std::move(run->json);
  } else {
    absl::StatusOr<nlohmann::json> runs =
        RunComparison(**model, *flags, *dataset);
    if (!runs.ok()) return Fail(kExitRunFailed, runs.status());
    report = std::move(*runs);
  }
  if (tracer != nullptr) {
    if (absl::Status s = tracer->WriteFile(flags->trace); !s.ok()) {
      return Fail(kExitRunFailed, s);
    }
    logger.Log(LogLevel::kInfo, "trace_written",
               {{"file", flags->trace}, {"spans", tracer->num_spans()}});
  }
  std::printf("%s\n", report.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace densegate::runtime

int main(int argc, char** argv) { return densegate::runtime::Main(argc, argv); }
