#include "runtime/logger.h"

#include "absl/strings/str_format.h"

namespace densegate::runtime {
namespace {

constexpr LogLevel kLevels[] = {LogLevel::kDebug, LogLevel::kInfo,
                                LogLevel::kWarning, LogLevel::kError,
                                LogLevel::kOff};

// Values with spaces, quotes or '=' are quoted so lines stay parseable.
void AppendValue(absl::string_view v, std::string* line) {
  if (!v.empty() && v.find_first_of(" \"=\t\n") == absl::string_view::npos) {
    absl::StrAppend(line, v);
    return;
  }
  line->push_back('"');
  for (char c : v) {
    if (c == '"' || c == '\\') line->push_back('\\');
    line->push_back(c == '\n' ? ' ' : c);
  }
  line->push_back('"');
}

}  // namespace

absl::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
    case LogLevel::kOff:
      return "off";
  }
  return "unknown";
}

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  for (LogLevel level : kLevels) {
    if (name == LogLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(absl::StrFormat(
      "unknown log level \"%s\": expected debug, info, warning, error or off",
      name));
}

Logger::Logger(LogLevel min_level, const Clock* clock, std::FILE* sink)
    : min_level_(min_level),
      clock_(clock),
      origin_ns_(clock->NowNanos()),
      sink_(sink) {}

void Logger::Log(LogLevel level, absl::string_view event,
                 std::initializer_list<LogField> fields) {
  if (!Enabled(level)) return;
  std::string line = absl::StrFormat(
      "ts=%.6f level=%s event=", (clock_->NowNanos() - origin_ns_) / 1e9,
      LogLevelName(level));
  AppendValue(event, &line);
  for (const LogField& f : fields) {
    absl::StrAppend(&line, " ", f.key, "=");
    AppendValue(f.value, &line);
  }
  line.push_back('\n');
  absl::MutexLock lock(&mu_);
  std::fputs(line.c_str(), sink_);
  std::fflush(sink_);
}

}  // namespace densegate::runtime
