#include "results/feedback/bundle.h"

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace densegate::results {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using test::ReadFile;
using test::TestTmpDir;
using test::WriteFile;
namespace fs = std::filesystem;

v1::FeedbackBundle Bundle(std::initializer_list<std::pair<std::string, std::string>> files) {
  v1::FeedbackBundle b;
  for (const auto& [path, content] : files) {
    v1::FeedbackFile* f = b.add_files();
    f->set_path(path);
    f->set_content(content);
  }
  return b;
}

TEST(CheckBundlePath, TakesRelativePathsWithinTheBundleOnly) {
  EXPECT_TRUE(CheckBundlePath("feedback.json").ok());
  EXPECT_TRUE(CheckBundlePath("logs/bench-serve-candidate-3.out").ok());
  for (const char* bad : {"", "/etc/passwd", "../x", "logs/../../x", "a//b", "./a", "a/.",
                          "logs\\x", "a/"}) {
    EXPECT_EQ(CheckBundlePath(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(CheckBundlePath(std::string("a\0b", 3)).ok());
  EXPECT_FALSE(CheckBundlePath("logs/a\nb").ok());  // The omitted list is stored one per line.
  EXPECT_FALSE(CheckBundlePath("logs/\xff.out").ok());
  EXPECT_TRUE(CheckBundlePath("logs/\xc3\xbc.out").ok());  // "ü"
  EXPECT_FALSE(CheckBundlePath(std::string(513, 'a')).ok());
}

TEST(IsValidUtf8, AcceptsUtf8AndRefusesWhatProtobufStringsCannotHold) {
  EXPECT_TRUE(IsValidUtf8("plain"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9 \xe2\x82\xac \xf0\x9f\x9a\x80"));  // é € and a rocket
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));      // Overlong "/".
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));  // A surrogate.
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));      // Cut short.
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // Past U+10FFFF.
}

TEST(CheckBundle, RefusesTwiceNamedPathsAndBundlesOverTheCap) {
  // Each file counts its bytes and its name's overhead.
  const int64_t cap = 4 + 2 * kFeedbackFileOverheadBytes;
  EXPECT_TRUE(CheckBundle(Bundle({{"a", "12"}, {"b", "34"}}), cap).ok());
  EXPECT_EQ(CheckBundle(Bundle({{"a", "12"}, {"b", "345"}}), cap).code(),
            absl::StatusCode::kResourceExhausted);
  v1::FeedbackBundle bad_omitted = Bundle({{"a", "1"}});
  bad_omitted.add_omitted("../x");
  EXPECT_EQ(CheckBundle(bad_omitted, cap).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(CheckBundle(Bundle({{"a", "1"}, {"a", "2"}}), 100).message(), HasSubstr("twice"));
}

TEST(ReadBundleDir, LeavesOutTracesThenLargestLogsToFitTheCap) {
  const std::string dir = TestTmpDir() + "/read";
  fs::remove_all(dir);
  WriteFile(dir + "/feedback.json", std::string(100, 'f'));
  WriteFile(dir + "/traces/serve-baseline.json", std::string(500, 't'));
  WriteFile(dir + "/logs/small.out", std::string(50, 's'));
  WriteFile(dir + "/logs/big.out", std::string(300, 'b'));
  fs::create_symlink("/etc/passwd", dir + "/logs/link");

  v1::FeedbackBundle all = *ReadBundleDir(dir, 10000);
  std::vector<std::string> paths;
  for (const auto& f : all.files()) paths.push_back(f.path());
  // The link is not followed, nor listed.
  EXPECT_THAT(paths, ElementsAre("feedback.json", "logs/big.out", "logs/small.out",
                                 "traces/serve-baseline.json"));
  EXPECT_TRUE(all.omitted().empty());
  EXPECT_EQ(BundleSummary(all), std::string(100, 'f'));

  // 100 + 50 bytes and two names' overhead fit in 300.
  v1::FeedbackBundle cut = *ReadBundleDir(dir, 300);
  paths.clear();
  for (const auto& f : cut.files()) paths.push_back(f.path());
  EXPECT_THAT(paths, ElementsAre("feedback.json", "logs/small.out"));
  EXPECT_THAT(cut.omitted(), ElementsAre("traces/serve-baseline.json", "logs/big.out"));
  EXPECT_LE(BundleCapBytes(cut), 300);
  EXPECT_EQ(BundleBytes(cut), 150);
}

TEST(ReadBundleDir, LeavesTheSummaryOutLast) {
  const std::string dir = TestTmpDir() + "/summary-last";
  fs::remove_all(dir);
  WriteFile(dir + "/feedback.json", std::string(1000, 'f'));
  WriteFile(dir + "/samples.json", std::string(10, 's'));
  v1::FeedbackBundle cut = *ReadBundleDir(dir, 1000 + kFeedbackFileOverheadBytes);
  ASSERT_EQ(cut.files_size(), 1);
  EXPECT_EQ(cut.files(0).path(), "feedback.json");
  EXPECT_THAT(cut.omitted(), ElementsAre("samples.json"));
}

TEST(WriteBundleDir, WritesFilesAndRefusesPathsOutsideTheDirectory) {
  const std::string dir = TestTmpDir() + "/write";
  fs::remove_all(dir);
  ASSERT_TRUE(WriteBundleDir(Bundle({{"feedback.json", "{}"}, {"logs/a.err", "x"}}), dir).ok());
  EXPECT_EQ(ReadFile(dir + "/logs/a.err"), "x");
  EXPECT_EQ(WriteBundleDir(Bundle({{"../escaped", "x"}}), dir).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(TestTmpDir() + "/escaped"));
  // A link planted where a file goes is replaced, not written through.
  const std::string target = TestTmpDir() + "/target";
  WriteFile(target, "keep");
  fs::create_symlink(target, dir + "/planted");
  ASSERT_TRUE(WriteBundleDir(Bundle({{"planted", "new"}}), dir).ok());
  EXPECT_EQ(ReadFile(target), "keep");
  EXPECT_EQ(ReadFile(dir + "/planted"), "new");
  // So is a hard link.
  fs::create_hard_link(target, dir + "/hard");
  ASSERT_TRUE(WriteBundleDir(Bundle({{"hard", "new"}}), dir).ok());
  EXPECT_EQ(ReadFile(target), "keep");
  // A link where a directory goes is refused.
  fs::create_directories(TestTmpDir() + "/elsewhere");
  fs::create_directory_symlink(TestTmpDir() + "/elsewhere", dir + "/traces");
  EXPECT_EQ(WriteBundleDir(Bundle({{"traces/t.json", "x"}}), dir).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(fs::exists(TestTmpDir() + "/elsewhere/t.json"));
}

TEST(Pieces, RoundTripThroughTheAssemblerAndStopAtTheCap) {
  const std::string big(kFeedbackPieceBytes * 2 + 7, 'x');
  v1::FeedbackBundle b = Bundle({{"empty", ""}, {"big", big}, {"small", "s"}});
  BundleAssembler assembler(INT64_MAX);
  int pieces = 0;
  ASSERT_TRUE(ForEachPiece(b, [&](const v1::FeedbackFile& p) {
    ++pieces;
    EXPECT_LE(static_cast<int64_t>(p.content().size()), kFeedbackPieceBytes);
    return assembler.Add(p).ok();
  }));
  EXPECT_EQ(pieces, 1 + 3 + 1);
  EXPECT_EQ(assembler.bundle().SerializeAsString(), b.SerializeAsString());

  BundleAssembler capped(kFeedbackPieceBytes);
  absl::Status last;
  EXPECT_FALSE(ForEachPiece(b, [&](const v1::FeedbackFile& p) {
    last = capped.Add(p);
    return last.ok();
  }));
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);

  BundleAssembler checked(100);
  v1::FeedbackFile bad;
  bad.set_path("../x");
  EXPECT_EQ(checked.Add(bad).code(), absl::StatusCode::kInvalidArgument);

  // Empty files are not free: each name counts.
  BundleAssembler names(3 * kFeedbackFileOverheadBytes);
  v1::FeedbackFile empty;
  for (int i = 0; i < 3; ++i) {
    empty.set_path(absl::StrCat("e", i));
    EXPECT_TRUE(names.Add(empty).ok());
  }
  empty.set_path("e3");
  EXPECT_EQ(names.Add(empty).code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace densegate::results
