#include "results/store/internal/deflate.h"

#include <string>

#include "gtest/gtest.h"

namespace densegate::results::internal {
namespace {

TEST(Deflate, RoundTripsAndShrinksText) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "INFO: Compiling kernels/kda/kda_decode.cc\n";
  absl::StatusOr<std::string> stream = Deflate(text);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_LT(stream->size() * 20, text.size());
  absl::StatusOr<std::string> back = Inflate(*stream, text.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, text);
  EXPECT_EQ(*Inflate(*Deflate(""), 0), "");
}

TEST(Inflate, RefusesTruncatedCorruptAndOversizedStreams) {
  const std::string text(100000, 'a');
  const std::string stream = *Deflate(text);
  EXPECT_EQ(Inflate(stream.substr(0, stream.size() / 2), text.size()).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(Inflate("not zlib at all", text.size()).status().code(), absl::StatusCode::kDataLoss);
  // A stream that expands past what the row says it holds.
  EXPECT_EQ(Inflate(stream, text.size() - 1).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace densegate::results::internal
