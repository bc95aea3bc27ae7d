#include <cstdio>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/clock.h"
#include "runtime/logger.h"
#include "runtime/tracer.h"

namespace densegate::runtime {
namespace {

TEST(TracerTest, WritesChromeTraceEvents) {
  ManualClock clock(1000);
  Tracer tracer(&clock);
  tracer.NameThread("main");
  std::atomic<int64_t> counter{0};
  {
    ScopedSpan span(&tracer, &clock, "decode_step", "stage", &counter,
                    {{"batch", 4}});
    clock.Advance(2500);
    span.AddArg("tokens", 4);
  }
  std::thread([&] {
    tracer.NameThread("other");
    tracer.AddSpan("transfer", "stage", 4000, 5000);
  }).join();
  EXPECT_EQ(counter.load(), 2500);
  EXPECT_EQ(tracer.num_spans(), 2u);

  const nlohmann::json trace = nlohmann::json::parse(tracer.ToJson());
  const auto& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 4u);  // Two thread names, two spans.
  EXPECT_EQ(events[0]["ph"], "M");
  EXPECT_EQ(events[0]["args"]["name"], "main");
  const auto& step = events[2];
  EXPECT_EQ(step["name"], "decode_step");
  EXPECT_EQ(step["ph"], "X");
  EXPECT_DOUBLE_EQ(step["ts"].get<double>(), 0.0);   // Microseconds from
  EXPECT_DOUBLE_EQ(step["dur"].get<double>(), 2.5);  // the tracer's start.
  EXPECT_EQ(step["args"]["batch"], 4);
  EXPECT_EQ(step["args"]["tokens"], 4);
  EXPECT_NE(events[3]["tid"], step["tid"]);
  EXPECT_EQ(events[3]["tid"], events[1]["tid"]);
}

TEST(TracerTest, WriteFileReportsAnUnwritablePath) {
  ManualClock clock;
  Tracer tracer(&clock);
  absl::Status s = tracer.WriteFile("/nonexistent-dir/trace.json");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string(s.message()).find("/nonexistent-dir/trace.json"),
            std::string::npos);
}

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string out;
  char buf[256];
  while (size_t n = std::fread(buf, 1, sizeof(buf), f)) out.append(buf, n);
  return out;
}

TEST(LoggerTest, WritesKeyValueLinesAtOrAboveItsLevel) {
  ManualClock clock(5'000'000'000);
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  Logger logger(LogLevel::kInfo, &clock, sink);
  clock.Advance(1'500'000);
  logger.Log(LogLevel::kDebug, "hidden", {{"x", 1}});
  logger.Log(LogLevel::kInfo, "request_finished",
             {{"request", 7}, {"error", "bad thing = x"}, {"ratio", 0.5}});
  EXPECT_TRUE(logger.Enabled(LogLevel::kError));
  EXPECT_FALSE(logger.Enabled(LogLevel::kDebug));
  EXPECT_EQ(ReadAll(sink),
            "ts=0.001500 level=info event=request_finished request=7 "
            "error=\"bad thing = x\" ratio=0.5\n");
  std::fclose(sink);
}

TEST(LoggerTest, ParsesLevels) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("off"), LogLevel::kOff);
  absl::StatusOr<LogLevel> bad = ParseLogLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("verbose"),
            std::string::npos);
}

}  // namespace
}  // namespace densegate::runtime
