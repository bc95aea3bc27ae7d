#include "harness/identity/benchmark_inputs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::WriteFile;

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kProgram = "\x7f" + std::string("ELF the program");

// Two checkouts laid out as Bazel leaves them: bazel-bin is a link into an
// output base outside the checkout, and the runfiles tree links back to the
// checkout's sources.
class BenchmarkInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(test::TestTmpDir()) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    for (const char* arm : {"baseline", "candidate"}) {
      const fs::path checkout = root_ / arm, out = root_ / (std::string(arm) + "-out");
      WriteFile(out / "bin/bench", kProgram);
      WriteFile(checkout / "configs/bench.json", R"({"layers": 4})");
      WriteFile(checkout / "kernels/kda.h", "// the kernel");
      fs::create_directories(out / "bin/bench.runfiles/ws/configs");
      fs::create_directory_symlink(out / "bin", checkout / "bazel-bin");
      fs::create_symlink(checkout / "configs/bench.json",
                         out / "bin/bench.runfiles/ws/configs/bench.json");
      // Names this checkout's absolute paths: differs between arms.
      WriteFile(out / "bin/bench.runfiles/MANIFEST", "ws/configs/bench.json " + checkout.string());
    }
    spec_.set_command("bazel-bin/bench --benchmark_filter='BM_x/1$' --n=2");
    spec_.mutable_skip_when_identical()->set_value(true);
  }

  InputComparison Compare() {
    absl::StatusOr<InputComparison> r = CompareBenchmarkInputs(spec_, (root_ / "baseline").string(),
                                                               (root_ / "candidate").string());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : InputComparison{};
  }

  fs::path root_;
  v1::BenchmarkSpec spec_;
};

TEST_F(BenchmarkInputsTest, SameExecutableAndRunfilesAreIdentical) {
  InputComparison r = Compare();
  EXPECT_TRUE(r.identical) << r.difference;
  // The executable and the runfile; the runfiles MANIFEST is left out.
  EXPECT_EQ(r.files, 2);
  EXPECT_EQ(r.bytes, kProgram.size() + std::string(R"({"layers": 4})").size());
}

TEST_F(BenchmarkInputsTest, ASourceChangeTheBenchmarkDoesNotReadIsIdentical) {
  WriteFile(root_ / "candidate/kernels/kda.h", "// the kernel, reworded");
  EXPECT_TRUE(Compare().identical);
}

TEST_F(BenchmarkInputsTest, ADifferentExecutableIsNot) {
  WriteFile(root_ / "candidate-out/bin/bench", kProgram + ", faster");
  InputComparison r = Compare();
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.difference, "bazel-bin/bench: contents differ");
}

TEST_F(BenchmarkInputsTest, SameSizeDifferentBytesIsNot) {
  WriteFile(root_ / "candidate-out/bin/bench", "\x7f" + std::string("ELF the Program"));
  EXPECT_FALSE(Compare().identical);
}

TEST_F(BenchmarkInputsTest, AChangedRunfileIsNot) {
  WriteFile(root_ / "candidate/configs/bench.json", R"({"layers": 8})");
  InputComparison r = Compare();
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.difference, "bazel-bin/bench.runfiles/ws/configs/bench.json: contents differ");
}

TEST_F(BenchmarkInputsTest, ARunfileOnlyOneArmHasIsNot) {
  WriteFile(root_ / "candidate-out/bin/bench.runfiles/ws/extra.so", "lib");
  InputComparison r = Compare();
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.difference, "bazel-bin/bench.runfiles/ws/extra.so: only in the candidate");
  fs::remove(root_ / "candidate-out/bin/bench.runfiles/ws/extra.so");
  WriteFile(root_ / "baseline-out/bin/bench.runfiles/ws/extra.so", "lib");
  EXPECT_EQ(Compare().difference, "bazel-bin/bench.runfiles/ws/extra.so: only in the baseline");
}

TEST_F(BenchmarkInputsTest, DeclaredReadsAreCompared) {
  WriteFile(root_ / "candidate/kernels/kda.h", "// the kernel, reworded");
  spec_.add_reads("kernels");
  InputComparison r = Compare();
  EXPECT_FALSE(r.identical);
  EXPECT_EQ(r.difference, "kernels/kda.h: contents differ");
}

TEST_F(BenchmarkInputsTest, AReadPathMissingInBothArmsIsIdentical) {
  spec_.add_reads("data/absent.bin");
  EXPECT_TRUE(Compare().identical);
  WriteFile(root_ / "baseline/data/absent.bin", "x");
  EXPECT_EQ(Compare().difference, "data/absent.bin: only in the baseline");
}

TEST_F(BenchmarkInputsTest, AnExecutableNotBuiltIsAnError) {
  fs::remove(root_ / "candidate-out/bin/bench");
  absl::StatusOr<InputComparison> r =
      CompareBenchmarkInputs(spec_, (root_ / "baseline").string(), (root_ / "candidate").string());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(r.status().message(), HasSubstr("bazel-bin/bench is not a file in the candidate"));
}

TEST_F(BenchmarkInputsTest, ASymbolicLinkLoopIsAnError) {
  spec_.add_reads("loop");
  fs::create_directories(root_ / "baseline/loop");
  fs::create_directory_symlink(root_ / "baseline/loop", root_ / "baseline/loop/again");
  absl::StatusOr<InputComparison> r =
      CompareBenchmarkInputs(spec_, (root_ / "baseline").string(), (root_ / "candidate").string());
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("symbolic-link loop"));
}

// The digest agrees with the comparison: equal for the two arms as laid
// out (their MANIFESTs differ), different once a runfile changes; and it is
// the digest of exactly these bytes, not of where the checkout lies.
TEST_F(BenchmarkInputsTest, DigestsAreEqualExactlyWhenTheInputsAre) {
  absl::StatusOr<std::string> baseline = BenchmarkInputsDigest(spec_, (root_ / "baseline").string());
  absl::StatusOr<std::string> candidate =
      BenchmarkInputsDigest(spec_, (root_ / "candidate").string());
  ASSERT_TRUE(baseline.ok()) << baseline.status();
  ASSERT_TRUE(candidate.ok()) << candidate.status();
  EXPECT_EQ(baseline->size(), 64);
  EXPECT_EQ(*baseline, *candidate);
  // The same files measured with other arguments are another measurement.
  v1::BenchmarkSpec other = spec_;
  other.set_command("bazel-bin/bench --benchmark_filter='BM_x/8$' --n=2");
  EXPECT_NE(*BenchmarkInputsDigest(other, (root_ / "baseline").string()), *baseline);
  WriteFile(root_ / "candidate/configs/bench.json", R"({"layers": 8})");
  absl::StatusOr<std::string> changed =
      BenchmarkInputsDigest(spec_, (root_ / "candidate").string());
  ASSERT_TRUE(changed.ok());
  EXPECT_NE(*changed, *baseline);
  // A file moved from one input to another is a different list.
  WriteFile(root_ / "candidate/configs/bench.json", R"({"layers": 4})");
  WriteFile(root_ / "candidate-out/bin/bench.runfiles/ws/empty", "");
  EXPECT_NE(*BenchmarkInputsDigest(spec_, (root_ / "candidate").string()), *baseline);
  fs::remove(root_ / "candidate-out/bin/bench");
  EXPECT_EQ(BenchmarkInputsDigest(spec_, (root_ / "candidate").string()).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace densegate::harness
