// Where the runtime's components report: clock, trace, logs, counters.
// Internal to runtime/. Plain pointers (tracer and logger may be null);
// the pointees are thread-safe.
#ifndef DENSEGATE_RUNTIME_TELEMETRY_H_
#define DENSEGATE_RUNTIME_TELEMETRY_H_

#include "runtime/clock.h"
#include "runtime/logger.h"
#include "runtime/stage_stats.h"
#include "runtime/tracer.h"

namespace densegate::runtime {

struct Telemetry {
  const Clock* clock = nullptr;
  Tracer* tracer = nullptr;  // Null: no trace.
  Logger* logger = nullptr;  // Null: no logs.
  StageStats* stats = nullptr;

  void Log(LogLevel level, absl::string_view event,
           std::initializer_list<LogField> fields = {}) const {
    if (logger != nullptr) logger->Log(level, event, fields);
  }
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_TELEMETRY_H_
