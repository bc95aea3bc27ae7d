#include "harness/identity/generated_outputs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate::harness {
namespace {

using ::testing::HasSubstr;

GeneratedTokens Outputs(std::vector<std::vector<int64_t>> sequences) {
  GeneratedTokens out;
  for (auto& s : sequences) out.emplace_back(std::move(s));
  return out;
}

TEST(GeneratedOutputsTest, TheSameTokensAreIdentical) {
  OutputComparison c = CompareGeneratedOutputs(Outputs({{1, 2, 3}, {4, 5}}),
                                               Outputs({{1, 2, 3}, {4, 5}}));
  EXPECT_TRUE(c.identical);
  EXPECT_EQ(c.agreement, 1);
  EXPECT_EQ(c.tokens, 5);
  std::string why;
  EXPECT_TRUE(OutputsAcceptable(c, false, 0, &why));
}

TEST(GeneratedOutputsTest, AgreementCountsPositionsAndNamesTheFirstDifference) {
  OutputComparison c = CompareGeneratedOutputs(Outputs({{1, 2, 3, 4}, {5, 6, 7, 8}}),
                                               Outputs({{1, 2, 9, 9}, {5, 6, 7, 8}}));
  EXPECT_FALSE(c.identical);
  EXPECT_DOUBLE_EQ(c.agreement, 6.0 / 8);
  EXPECT_EQ(c.first_difference, "request 0, token 2: 3 in the baseline arm, 9 in the candidate's");
  std::string why;
  // Without a declared precision change nothing but identical passes.
  EXPECT_FALSE(OutputsAcceptable(c, false, 0.5, &why));
  EXPECT_THAT(why, HasSubstr("without a declared precision change"));
  // With one, the manifest's bound decides.
  EXPECT_TRUE(OutputsAcceptable(c, true, 0.75, &why));
  EXPECT_FALSE(OutputsAcceptable(c, true, 0.8, &why));
  EXPECT_THAT(why, HasSubstr("75.0% of 8 generated tokens agree"));
  EXPECT_FALSE(OutputsAcceptable(c, true, 0, &why));
  EXPECT_THAT(why, HasSubstr("accepts no precision change"));
}

TEST(GeneratedOutputsTest, PairsPoolTheirTokens) {
  OutputComparison total;
  Pool(CompareGeneratedOutputs(Outputs({{1, 2}}), Outputs({{1, 2}})), &total);
  EXPECT_TRUE(total.identical);
  Pool(CompareGeneratedOutputs(Outputs({{1, 2, 3, 4}}), Outputs({{1, 9, 9, 9}})), &total);
  Pool(CompareGeneratedOutputs(Outputs({{5, 6}}), Outputs({{7, 6}})), &total);
  EXPECT_FALSE(total.identical);
  EXPECT_EQ(total.tokens, 8);
  EXPECT_EQ(total.matched, 4);
  EXPECT_DOUBLE_EQ(total.agreement, 0.5);
  EXPECT_EQ(total.first_difference, "request 0, token 1: 2 in the baseline arm, 9 in the candidate's");
}

TEST(GeneratedOutputsTest, MissingFailedOrShorterSequencesAreDifferences) {
  GeneratedTokens failed = Outputs({{1, 2}});
  failed.emplace_back(std::nullopt);
  OutputComparison c = CompareGeneratedOutputs(Outputs({{1, 2}, {3, 4}}), failed);
  EXPECT_FALSE(c.identical);
  EXPECT_EQ(c.first_difference, "request 1 failed in the candidate arm");
  EXPECT_DOUBLE_EQ(c.agreement, 0.5);

  c = CompareGeneratedOutputs(Outputs({{1, 2, 3}}), Outputs({{1, 2}}));
  EXPECT_FALSE(c.identical);
  EXPECT_THAT(c.first_difference, HasSubstr("3 tokens in the baseline arm, 2 in the candidate's"));

  c = CompareGeneratedOutputs(Outputs({{1}}), Outputs({{1}, {2}}));
  EXPECT_FALSE(c.identical);
  EXPECT_THAT(c.first_difference, HasSubstr("1 requests in the baseline arm's outputs, 2"));
}

TEST(GeneratedOutputsTest, TokenSequencesAreParsedFromTheCommandsJson) {
  absl::StatusOr<GeneratedTokens> t =
      JsonTokenSequencesAt(R"({"run": {"outputs": [[1, 2], null, []]}})", "run.outputs");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3);
  EXPECT_EQ((*t)[0], (std::vector<int64_t>{1, 2}));
  EXPECT_FALSE((*t)[1].has_value());
  EXPECT_TRUE((*t)[2]->empty());
  t = JsonTokenSequencesAt(R"({"outputs": [[1, 2.5]]})", "outputs");
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("outputs[0]"));
  t = JsonTokenSequencesAt(R"({"outputs": 3})", "outputs");
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("not an array"));
  t = JsonTokenSequencesAt(R"({})", "outputs");
  EXPECT_FALSE(t.ok());
}

}  // namespace
}  // namespace densegate::harness
