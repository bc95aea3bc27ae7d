// Structured logs: one line per event, "key=value" pairs (logfmt), e.g.
//   ts=1.234567 level=info event=request_finished request=7 output_tokens=64
// Lines below the configured level are dropped before they are formatted.
//
// Thread-safe (a mutex serializes lines).
#ifndef DENSEGATE_RUNTIME_LOGGER_H_
#define DENSEGATE_RUNTIME_LOGGER_H_

#include <cstdio>
#include <initializer_list>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "runtime/clock.h"

namespace densegate::runtime {

enum class LogLevel {
  kDebug = 0,
  kInfo = 1,
  kWarning = 2,
  kError = 3,
  kOff = 4
};

// "debug", "info", "warning", "error", "off" and back.
absl::string_view LogLevelName(LogLevel level);
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

// One key=value pair; values are formatted with absl::StrCat.
struct LogField {
  template <typename T>
  LogField(absl::string_view k, const T& v) : key(k), value(absl::StrCat(v)) {}
  LogField(absl::string_view k, absl::string_view v) : key(k), value(v) {}
  LogField(absl::string_view k, const char* v) : key(k), value(v) {}
  absl::string_view key;
  std::string value;
};

class Logger {
 public:
  // Writes to `sink` (not owned; stderr by default). Timestamps are seconds
  // on `clock` since the logger was created.
  Logger(LogLevel min_level, const Clock* clock, std::FILE* sink = stderr);
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  bool Enabled(LogLevel level) const {
    return level >= min_level_ && level != LogLevel::kOff;
  }
  void Log(LogLevel level, absl::string_view event,
           std::initializer_list<LogField> fields = {});

 private:
  const LogLevel min_level_;
  const Clock* const clock_;
  const int64_t origin_ns_;
  absl::Mutex mu_;
  std::FILE* const sink_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace densegate::runtime

#endif  // DENSEGATE_RUNTIME_LOGGER_H_
