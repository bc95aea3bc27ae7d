// Runs the real `densegate` binary and checks exit codes and messages.
#include <sys/wait.h>

#include <climits>
#include <cstdlib>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace {

using densegate::test::Runfile;
using densegate::test::TestTmpDir;
using densegate::test::WriteFile;

using ::testing::HasSubstr;

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr together.
};

Result RunDensegate(const std::string& args) {
  std::string cmd = absl::StrCat(Runfile("cli/densegate"), " ", args, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}


// A file in the test's temporary directory; returns its path.
std::string TmpFile(const std::string& name, const std::string& text) {
  const std::string path = TestTmpDir() + "/" + name;
  WriteFile(path, text);
  return path;
}

TEST(CliTest, VersionPrintsVersionCommitAndFlags) {
  Result r = RunDensegate("version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("densegate 0."));
  EXPECT_THAT(r.output, HasSubstr("commit"));
  EXPECT_THAT(r.output, HasSubstr("mode="));
}

TEST(CliTest, NoCommandIsUsageError) {
  Result r = RunDensegate("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("subcommand is required"));
}

TEST(CliTest, UnknownCommandIsUsageError) {
  Result r = RunDensegate("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("frobnicate"));
}

TEST(CliTest, UnknownFlagNamesTheFlag) {
  Result r = RunDensegate("manifest check --strict");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--strict"));
}

TEST(CliTest, EverySubcommandHasHelp) {
  for (const char* cmd : {"", "version", "manifest", "manifest check", "db", "db migrate",
                          "verdict", "verdict recompute", "report"}) {
    Result r = RunDensegate(absl::StrCat(cmd, " --help"));
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("Usage:")) << cmd;
  }
}

TEST(CliTest, ChecksThisRepositoryManifest) {
  // Through the runfiles link to the source tree, so that the protected
  // paths are checked against the whole repository.
  char real[PATH_MAX];
  ASSERT_NE(realpath(Runfile("densegate.json").c_str(), real), nullptr);
  Result r = RunDensegate(absl::StrCat("manifest check ", real));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr(": OK ("));
}

TEST(CliTest, MissingManifestFileIsUsageError) {
  Result r = RunDensegate("manifest check /nonexistent/densegate.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("cannot read \"/nonexistent/densegate.json\""));
}

TEST(CliTest, InvalidManifestListsEveryErrorWithFieldPath) {
  std::string path = TmpFile("densegate.json", R"({
    "schema_version": 1,
    "name": "x",
    "build": {"command": "make"},
    "precision": [{"name": "p", "op": "MatMul", "runner": "r",
                   "lengths": [4096, 1024], "max_rel_rms": 1e-3}],
    "protected_paths": ["densegate.json"]
  })");
  Result r = RunDensegate("manifest check " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("2 errors"));
  EXPECT_THAT(r.output, HasSubstr("precision[0].op: \"MatMul\": must be an op"));
  EXPECT_THAT(r.output, HasSubstr("precision[0].lengths[1]: lengths must be strictly increasing"));
}

TEST(CliTest, MalformedJsonIsUsageErrorWithoutCrash) {
  std::string path = TmpFile("broken.json", "{\"schema_version\": 1,,}");
  Result r = RunDensegate("manifest check " + path);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("invalid JSON"));
  EXPECT_THAT(r.output, HasSubstr("line 1"));
}

TEST(CliTest, DbMigrateCreatesAndReportsTheSchema) {
  std::string db = absl::StrCat("sqlite:", TestTmpDir(), "/sub/dir/store.db");
  Result first = RunDensegate("db migrate --db " + db);
  EXPECT_EQ(first.exit_code, 0) << first.output;
  EXPECT_THAT(first.output, HasSubstr("sqlite store"));
  EXPECT_THAT(first.output, HasSubstr("schema version"));
  Result again = RunDensegate("db migrate --db " + db);  // Idempotent.
  EXPECT_EQ(again.exit_code, 0) << again.output;
}

TEST(CliTest, ReportWritesMarkdownAndJsonAndRejectsBadFlags) {
  std::string db = absl::StrCat("sqlite:", TestTmpDir(), "/report.db");
  ASSERT_EQ(RunDensegate("db migrate --db " + db).exit_code, 0);
  const std::string out = TestTmpDir();
  Result r = RunDensegate("report --db " + db + " --branch main --out " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("report.md"));
  std::ifstream md(out + "/report.md");
  std::stringstream text;
  text << md.rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("# densegate report"));
  EXPECT_THAT(text.str(), HasSubstr("branch main"));
  EXPECT_TRUE(std::ifstream(out + "/report.json").good());
  EXPECT_TRUE(std::ifstream(out + "/report.html").good());
  EXPECT_EQ(RunDensegate("report --db " + db + " --since yesterday --out " + out).exit_code, 2);
  EXPECT_EQ(RunDensegate("report --db " + db + " --format pdf --out " + out).exit_code, 2);
}

TEST(CliTest, VerdictRecomputeOfUnknownIdIsUsageError) {
  std::string db = absl::StrCat("sqlite:", TestTmpDir(), "/recompute.db");
  ASSERT_EQ(RunDensegate("db migrate --db " + db).exit_code, 0);
  Result r = RunDensegate("verdict recompute ev-missing --db " + db);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("ev-missing"));
}

TEST(CliTest, UnreachableDatabaseIsInfrastructureError) {
  Result r = RunDensegate("db migrate --db postgresql://nobody@127.0.0.1:1/none");
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot open"));
}

}  // namespace
