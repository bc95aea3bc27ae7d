#include "manifest/manifest.h"

#include <fstream>
#include <functional>
#include <set>
#include <string>

#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/test_util.h"

namespace densegate {
namespace {

using test::TestTmpDir;

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using json = nlohmann::json;

// A repository holding exactly the listed paths.
class FakeTree : public RepoTree {
 public:
  explicit FakeTree(std::set<std::string> paths) : paths_(std::move(paths)) {}
  bool Exists(absl::string_view path) const override {
    return paths_.count(std::string(path)) > 0;
  }

 private:
  std::set<std::string> paths_;
};

const FakeTree& Repo() {
  static const FakeTree* tree =
      new FakeTree({"densegate.json", "kernels/kda", "tests"});
  return *tree;
}

// A manifest exercising every section; each case below breaks one thing.
json ValidManifest() {
  return json::parse(R"({
    "schema_version": 1,
    "name": "workload",
    "build": {"command": "bazel build //kernels/...", "timeout_s": 600},
    "correctness": [
      {"name": "unit", "command": "bazel test //kernels/...", "results": "BAZEL_TEST"}
    ],
    "kernel_checks": [
      {"name": "kda-decode-b8", "op": "kda_decode", "runner": "bin/runner",
       "shape": {"batch": 8, "heads": 32, "k": 128, "v": 128},
       "max_rel_rms": 1e-5, "calls": 20, "metric": "kda_decode.b8"}
    ],
    "precision": [
      {"name": "decode-long", "op": "kda_decode", "runner": "bin/runner",
       "lengths": [1024, 4096, 65536], "max_rel_rms": 1e-3,
       "shape": {"heads": 1, "k": 128, "v": 128}, "params": {"gate_scale": 1000}}
    ],
    "benchmarks": [
      {"name": "micro", "kind": "GOOGLE_BENCHMARK", "command": "bin/bench",
       "metrics": [{"name": "kda_decode.fused_b32", "source": "BM_KdaDecode_fused/32",
                    "field": "real_time", "unit": "ns", "aggregate": "REPETITION_BEST",
                    "direction": "LOWER_IS_BETTER", "primary": true}]},
      {"name": "serve", "kind": "JSON_COMMAND", "command": "bin/serve_bench --rate=inf",
       "skip_when_identical": true, "reads": ["tests/"],
       "metrics": [{"name": "serve.output_tps", "source": "output_throughput",
                    "unit": "tok/s", "direction": "HIGHER_IS_BETTER"}]}
    ],
    "gate": {"min_effect": 0.02, "confidence": 0.95, "min_pairs": 4, "max_pairs": 30},
    "protected_paths": ["densegate.json", "tests/", "kernels/kda"]
  })");
}

std::vector<ManifestError> ParseAndValidate(const json& j) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = ParseManifest(j.dump(), &errors);
  if (!m.ok()) return errors;
  return ValidateManifest(*m, Repo());
}

std::string Describe(const std::vector<ManifestError>& errors) {
  std::vector<std::string> lines;
  for (const auto& e : errors) lines.push_back(e.ToString());
  return absl::StrJoin(lines, "\n");
}

TEST(ManifestTest, ValidManifestHasNoErrors) {
  std::vector<ManifestError> errors = ParseAndValidate(ValidManifest());
  EXPECT_TRUE(errors.empty()) << Describe(errors);
}

TEST(ManifestTest, RepetitionAggregateParsesAndDefaultsToMedian) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = ParseManifest(ValidManifest().dump(), &errors);
  ASSERT_TRUE(m.ok()) << Describe(errors);
  EXPECT_EQ(m->benchmarks(0).metrics(0).aggregate(), v1::REPETITION_BEST);
  EXPECT_EQ(m->benchmarks(1).metrics(0).aggregate(), v1::REPETITION_MEDIAN);
}

TEST(ManifestTest, MeasuredMetricsAreTheBenchmarksThenTheTimedKernelChecks) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = ParseManifest(ValidManifest().dump(), &errors);
  ASSERT_TRUE(m.ok()) << Describe(errors);
  EXPECT_THAT(MeasuredMetrics(*m),
              ::testing::ElementsAre("kda_decode.fused_b32", "serve.output_tps", "kda_decode.b8"));
}

TEST(ManifestTest, AMetricScopeNamesMeasuredMetricsHoldsTheClaimsAndAPrimaryForAGain) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = ParseManifest(ValidManifest().dump(), &errors);
  ASSERT_TRUE(m.ok()) << Describe(errors);
  v1::Claim claim;
  claim.set_metric("kda_decode.fused_b32");
  claim.set_min_speedup(1.5);
  EXPECT_TRUE(CheckMetricScope(*m, {}, {claim}, v1::GAIN).ok());
  EXPECT_TRUE(CheckMetricScope(*m, {"kda_decode.fused_b32"}, {claim}, v1::GAIN).ok());
  EXPECT_TRUE(CheckMetricScope(*m, {"kda_decode.b8"}, {}, v1::GAIN).ok());  // A timed check.
  EXPECT_TRUE(CheckMetricScope(*m, {"serve.output_tps"}, {}, v1::NO_REGRESSION).ok());
  absl::Status s = CheckMetricScope(*m, {"serve.output_tps"}, {}, v1::GAIN);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("needs a primary metric"));
  s = CheckMetricScope(*m, {"serve.output_tps"}, {claim}, v1::NO_REGRESSION);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("outside the metric scope"));
  s = CheckMetricScope(*m, {"kda_decode.nope"}, {}, v1::NO_REGRESSION);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("does not measure"));
}

TEST(ManifestTest, BenchmarkExecutableIsTheCommandsFirstWord) {
  v1::BenchmarkSpec b;
  b.set_command("  bazel-bin/kernels/bench\t--benchmark_filter='x$' --n=2");
  EXPECT_EQ(BenchmarkExecutable(b), "bazel-bin/kernels/bench");
  b.set_command("");
  EXPECT_EQ(BenchmarkExecutable(b), "");
}

// Unchanged benchmarks are skipped by default where their inputs can be
// compared; a command whose inputs cannot be is measured, not an error,
// unless the manifest asks for the skip explicitly.
TEST(ManifestTest, UnchangedBenchmarksAreSkippedByDefaultWhereTheirInputsCanBeCompared) {
  v1::BenchmarkSpec b;
  b.set_command("bazel-bin/runtime/serve_bench --seed={seed}");
  EXPECT_EQ(InputIdentityProblem(b), std::nullopt);
  EXPECT_TRUE(SkipsWhenIdentical(b));
  b.mutable_skip_when_identical()->set_value(false);
  EXPECT_FALSE(SkipsWhenIdentical(b));
  // Quoted, an operator is part of one argument: the shell runs one program.
  for (const char* command :
       {"bazel-bin/kernels/kda/kda_decode_bench --benchmark_filter='BM_(naive|fused)/32$'",
        "bin/bench --label \"a|b; c > d\"", "bin/bench --name=a\\|b"}) {
    v1::BenchmarkSpec quoted;
    quoted.set_command(command);
    EXPECT_EQ(InputIdentityProblem(quoted), std::nullopt) << command;
  }

  for (const char* command : {"python3 bench.py", "bin/bench | tee out", "/opt/bench",
                              "../bin/bench", "bin/bench --n=$(nproc)",
                              "bin/bench --n=\"$(nproc)\"", "bin/bench 'a' | tee out"}) {
    v1::BenchmarkSpec unprovable;
    unprovable.set_command(command);
    EXPECT_NE(InputIdentityProblem(unprovable), std::nullopt) << command;
    EXPECT_FALSE(SkipsWhenIdentical(unprovable)) << command;
  }

  json j = ValidManifest();
  j["benchmarks"][1].erase("skip_when_identical");
  j["benchmarks"][1]["command"] = "bin/serve_bench --rate=inf | tee out.json";
  j["benchmarks"][1].erase("reads");
  EXPECT_THAT(ParseAndValidate(j), ::testing::IsEmpty());
}

struct InvalidCase {
  std::string name;
  std::function<void(json&)> mutate;
  std::string field;     // Exact field path of the expected error.
  std::string message;   // Substring of its message.
};

void PrintTo(const InvalidCase& c, std::ostream* os) { *os << c.name; }

class InvalidManifestTest : public ::testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidManifestTest, ReportsFieldAndReason) {
  const InvalidCase& c = GetParam();
  json j = ValidManifest();
  c.mutate(j);
  std::vector<ManifestError> errors = ParseAndValidate(j);
  ASSERT_FALSE(errors.empty()) << "expected an error at " << c.field;
  bool found = false;
  for (const auto& e : errors) {
    if (e.field == c.field && e.message.find(c.message) != std::string::npos) {
      found = true;
    }
  }
  EXPECT_TRUE(found) << "wanted " << c.field << ": ..." << c.message
                     << "...\ngot:\n"
                     << Describe(errors);
}

INSTANTIATE_TEST_SUITE_P(
    Table, InvalidManifestTest,
    ::testing::ValuesIn(std::vector<InvalidCase>{
        {"UnknownTopLevelField", [](json& j) { j["benchmark"] = json::array(); },
         "benchmark", "unknown field; fields of Manifest:"},
        {"UnknownNestedField",
         [](json& j) { j["build"]["comand"] = "make"; }, "build.comand",
         "unknown field; fields of BuildSpec: command, timeout_s"},
        {"WrongType", [](json& j) { j["gate"]["min_effect"] = "two percent"; },
         "gate.min_effect", "expected a number"},
        {"UnknownEnumValue",
         [](json& j) { j["benchmarks"][0]["metrics"][0]["direction"] = "UP"; },
         "benchmarks[0].metrics[0].direction",
         "expected one of LOWER_IS_BETTER, HIGHER_IS_BETTER"},
        {"MissingSchemaVersion", [](json& j) { j.erase("schema_version"); },
         "schema_version", "required: 1"},
        {"FutureSchemaVersion", [](json& j) { j["schema_version"] = 7; },
         "schema_version", "unsupported version 7"},
        {"MissingBuildCommand", [](json& j) { j["build"].erase("command"); },
         "build.command", "required"},
        {"KernelOpNotAWord",
         [](json& j) { j["kernel_checks"][0]["op"] = "flash attention"; },
         "kernel_checks[0].op", "must be an op of the kernel runner"},
        {"KernelCheckVariantNotAWord",
         [](json& j) { j["kernel_checks"][0]["variant"] = "Fused!"; },
         "kernel_checks[0].variant", "must be a variant"},
        {"ConfirmedByAnUntimedMetric",
         [](json& j) { j["benchmarks"][0]["metrics"][0]["confirmed_by"] = "nope"; },
         "benchmarks[0].metrics[0].confirmed_by", "\"nope\" is not the metric of a timed kernel check"},
        {"OutputsWithoutASeedInTheCommand",
         [](json& j) { j["benchmarks"][1]["outputs"]["source"] = "outputs"; },
         "benchmarks[1].command", "with outputs, must contain {seed}"},
        {"OutputsAgreementOutOfRange",
         [](json& j) {
           j["benchmarks"][1]["command"] = "bin/serve_bench --seed={seed}";
           j["benchmarks"][1]["outputs"] = {{"source", "outputs"}, {"min_token_agreement", 1.5}};
         },
         "benchmarks[1].outputs.min_token_agreement", "must be in [0, 1]"},
        {"OutputsOnAGoogleBenchmark",
         [](json& j) { j["benchmarks"][0]["outputs"]["source"] = "outputs"; },
         "benchmarks[0].outputs", "only used with kind JSON_COMMAND"},
        {"PrecisionOpNotAWord",
         [](json& j) { j["precision"][0]["op"] = "KDA decode"; },
         "precision[0].op", "lowercase letters, digits and _"},
        {"PrecisionShapeSetsTheLength",
         [](json& j) { j["precision"][0]["shape"]["tokens"] = 4096; },
         "precision[0].shape.tokens", "set by the harness to each context length"},
        {"ShapeValueNotPositive",
         [](json& j) { j["kernel_checks"][0]["shape"]["k"] = 0; },
         "kernel_checks[0].shape.k", "between 1 and 1073741824, got 0"},
        {"ShapeKeyNotAWord",
         [](json& j) { j["kernel_checks"][0]["shape"]["Heads"] = 4; },
         "kernel_checks[0].shape.Heads", "a shape parameter"},
        {"EmptyLengths", [](json& j) { j["precision"][0]["lengths"] = json::array(); },
         "precision[0].lengths", "at least one context length"},
        {"NonIncreasingLengths",
         [](json& j) { j["precision"][0]["lengths"] = {1024, 1024}; },
         "precision[0].lengths[1]", "strictly increasing"},
        {"NegativeLength", [](json& j) { j["precision"][0]["lengths"] = {-5}; },
         "precision[0].lengths[0]", "between 1 and"},
        {"ZeroPrecisionBound", [](json& j) { j["precision"][0]["max_rel_rms"] = 0; },
         "precision[0].max_rel_rms", "finite number > 0"},
        {"GrowthBelowOne",
         [](json& j) { j["precision"][0]["max_growth_vs_baseline"] = 0.5; },
         "precision[0].max_growth_vs_baseline", ">= 1"},
        {"EmptyBenchmarkMetrics",
         [](json& j) { j["benchmarks"][1]["metrics"] = json::array(); },
         "benchmarks[1].metrics", "at least one metric"},
        {"DuplicateMetricName",
         [](json& j) {
           j["benchmarks"][1]["metrics"][0]["name"] = "kda_decode.fused_b32";
         },
         "benchmarks[1].metrics[0].name",
         "duplicate metric name \"kda_decode.fused_b32\" (first defined at "
         "benchmarks[0].metrics[0].name)"},
        {"DuplicateMetricAcrossKernelCheck",
         [](json& j) {
           j["benchmarks"][0]["metrics"][0]["name"] = "kda_decode.b8";
         },
         "benchmarks[0].metrics[0].name", "first defined at kernel_checks[0].metric"},
        {"DuplicateSuiteName",
         [](json& j) { j["benchmarks"][1]["name"] = "unit"; },
         "benchmarks[1].name", "duplicate suite name \"unit\""},
        {"BadMetricName",
         [](json& j) { j["benchmarks"][0]["metrics"][0]["name"] = "Decode Speed"; },
         "benchmarks[0].metrics[0].name", "lowercase letters"},
        {"MissingBenchmarkKind", [](json& j) { j["benchmarks"][0].erase("kind"); },
         "benchmarks[0].kind", "GOOGLE_BENCHMARK or JSON_COMMAND"},
        {"UnknownBenchmarkField",
         [](json& j) { j["benchmarks"][0]["metrics"][0]["field"] = "wall"; },
         "benchmarks[0].metrics[0].field", "unknown Google Benchmark field"},
        {"AggregateOnJsonCommand",
         [](json& j) { j["benchmarks"][1]["metrics"][0]["aggregate"] = "REPETITION_BEST"; },
         "benchmarks[1].metrics[0].aggregate", "only used with kind GOOGLE_BENCHMARK"},
        {"NoPrimaryMetric",
         [](json& j) { j["benchmarks"][0]["metrics"][0]["primary"] = false; },
         "benchmarks", "no metric is marked primary"},
        {"NothingToEvaluate",
         [](json& j) {
           for (const char* k : {"correctness", "kernel_checks", "precision", "benchmarks"})
             j.erase(k);
         },
         "", "nothing to evaluate"},
        {"JunitWithoutResultsPath",
         [](json& j) { j["correctness"][0]["results"] = "JUNIT_XML"; },
         "correctness[0].results_path", "JUnit XML"},
        {"NegativeMinEffect", [](json& j) { j["gate"]["min_effect"] = -0.1; },
         "gate.min_effect", "fraction in [0, 1)"},
        {"ConfidenceTooLow", [](json& j) { j["gate"]["confidence"] = 0.3; },
         "gate.confidence", "(0.5, 1)"},
        {"MaxPairsBelowMin", [](json& j) { j["gate"]["max_pairs"] = 2; },
         "gate.max_pairs", "must be >= min_pairs (4), got 2"},
        {"ProtectedPathMissing",
         [](json& j) { j["protected_paths"].push_back("benchmarks/"); },
         "protected_paths[3]", "\"benchmarks\" does not exist"},
        {"ProtectedPathEscapes",
         [](json& j) { j["protected_paths"].push_back("../etc"); },
         "protected_paths[3]", "must not leave the repository"},
        {"ProtectedPathDuplicate",
         [](json& j) { j["protected_paths"].push_back("tests"); },
         "protected_paths[3]", "duplicate of protected_paths[1]"},
        {"ManifestNotProtected",
         [](json& j) { j["protected_paths"] = {"tests"}; }, "protected_paths",
         "must include \"densegate.json\""},
        {"RunnerAbsolute",
         [](json& j) { j["kernel_checks"][0]["runner"] = "/usr/bin/runner"; },
         "kernel_checks[0].runner", "relative to the repository root"},
        {"NegativeTimeout", [](json& j) { j["build"]["timeout_s"] = -1; },
         "build.timeout_s", "between 0 (default)"},
        {"CountersOnGoogleBenchmark",
         [](json& j) { j["benchmarks"][0]["counters"] = "stages"; },
         "benchmarks[0].counters", "only used with kind JSON_COMMAND"},
        {"ReadsWhenNeverSkipped",
         [](json& j) {
           j["benchmarks"][0]["skip_when_identical"] = false;
           j["benchmarks"][0]["reads"] = {"tests"};
         },
         "benchmarks[0].reads", "not used when skip_when_identical is false"},
        {"SkipWhenIdenticalWithPipeline",
         [](json& j) { j["benchmarks"][1]["command"] = "bin/serve_bench | tee out.json"; },
         "benchmarks[1].command",
         "skip_when_identical is true, but its inputs can only be compared for one program, "
         "and the command has \"|\""},
        {"SkipWhenIdenticalWithSubstitution",
         [](json& j) { j["benchmarks"][1]["command"] = "bin/serve_bench --n=$(nproc)"; },
         "benchmarks[1].command", "has \"$(\""},
        {"SkipWhenIdenticalOnPathProgram",
         [](json& j) { j["benchmarks"][1]["command"] = "python3 bench.py"; },
         "benchmarks[1].command", "the executable's path in the checkout"},
        {"SkipWhenIdenticalExecutableEscapes",
         [](json& j) { j["benchmarks"][1]["command"] = "../bin/serve_bench"; },
         "benchmarks[1].command", "not \"../bin/serve_bench\""},
        {"ReadsAbsolute",
         [](json& j) { j["benchmarks"][1]["reads"].push_back("/etc/passwd"); },
         "benchmarks[1].reads[1]", "relative to the repository root"},
        {"TraceArgWithoutPath", [](json& j) { j["benchmarks"][1]["trace_arg"] = "--trace"; },
         "benchmarks[1].trace_arg", "must contain {path}"},
    }),
    [](const ::testing::TestParamInfo<InvalidCase>& info) {
      return info.param.name;
    });

TEST(ManifestTest, WarningsNameUnconfirmedMetricsAndUncomparedOutputs) {
  std::vector<ManifestError> errors;
  absl::StatusOr<v1::Manifest> m = ParseManifest(ValidManifest().dump(), &errors);
  ASSERT_TRUE(m.ok());
  std::vector<ManifestError> warnings = ManifestWarnings(*m);
  ASSERT_EQ(warnings.size(), 2);
  EXPECT_EQ(warnings[0].field, "benchmarks[0].metrics[0].confirmed_by");
  EXPECT_THAT(warnings[0].message, HasSubstr("kda_decode.fused_b32 rests on the candidate-built "
                                             "benchmark binary alone"));
  EXPECT_EQ(warnings[1].field, "benchmarks[1].outputs");

  json linked = ValidManifest();
  linked["benchmarks"][0]["metrics"][0]["confirmed_by"] = "kda_decode.b8";
  linked["benchmarks"][1]["command"] = "bin/serve_bench --rate=inf --seed={seed}";
  linked["benchmarks"][1]["outputs"] = {{"source", "outputs"}};
  EXPECT_THAT(ParseAndValidate(linked), IsEmpty());
  m = ParseManifest(linked.dump(), &errors);
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(ManifestWarnings(*m), IsEmpty());
}

TEST(ManifestTest, SyntaxErrorNamesLineAndColumn) {
  std::vector<ManifestError> errors;
  auto m = ParseManifest("{\n  \"name\": \"x\",\n  \"build\": {\n}", &errors);
  ASSERT_FALSE(m.ok());
  ASSERT_EQ(errors.size(), 1);
  EXPECT_THAT(errors[0].message, HasSubstr("invalid JSON"));
  EXPECT_THAT(errors[0].message, HasSubstr("line 4"));
}

TEST(ManifestTest, ReportsEveryErrorNotJustTheFirst) {
  json j = ValidManifest();
  j["build"].erase("command");
  j["precision"][0]["op"] = "Not An Op";
  j["gate"]["confidence"] = 2;
  EXPECT_GE(ParseAndValidate(j).size(), 3) << Describe(ParseAndValidate(j));
}

TEST(ManifestTest, LoadsFileRelativeToItsDirectory) {
  std::string dir = TestTmpDir() + "/repo";
  ASSERT_EQ(system(("mkdir -p " + dir + "/tests " + dir + "/kernels/kda").c_str()), 0);
  std::ofstream(dir + "/densegate.json") << ValidManifest().dump(2);
  std::vector<ManifestError> errors;
  auto m = LoadManifestFile(dir + "/densegate.json", &errors);
  ASSERT_TRUE(m.ok()) << m.status() << "\n" << Describe(errors);
  EXPECT_EQ(m->name(), "workload");
  EXPECT_EQ(m->benchmarks(0).metrics(0).direction(), v1::LOWER_IS_BETTER);
}

TEST(ManifestTest, MissingFileIsNotFound) {
  std::vector<ManifestError> errors;
  auto m = LoadManifestFile("/nonexistent/densegate.json", &errors);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
  ASSERT_EQ(errors.size(), 1);
  EXPECT_THAT(errors[0].message, HasSubstr("No such file or directory"));
}

TEST(ManifestTest, DirectoryIsRejected) {
  std::vector<ManifestError> errors;
  auto m = LoadManifestFile(TestTmpDir(), &errors);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(errors.at(0).message, HasSubstr("is a directory"));
}

}  // namespace
}  // namespace densegate
