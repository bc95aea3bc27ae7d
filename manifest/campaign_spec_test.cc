#include "manifest/campaign_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace densegate {
namespace {

using ::testing::HasSubstr;

constexpr char kGood[] = R"({"id": "kda-3x", "repo": "/srv/repo", "branch": "main",
  "goal": {"metric": "runtime.output_tok_s", "min_speedup": 3},
  "budget": {"max_experiments": 40, "max_node_hours": 12},
  "proposers": [{"knob_search": {"space": "tuning/knobs.json", "finalists": 2}},
                {"patch_catalog": {"dir": "patches"}},
                {"external_command": {"argv": ["./propose.sh"], "timeout_s": 900}}]})";

TEST(CampaignSpecTest, AGoodCampaignParses) {
  absl::StatusOr<v1::Campaign> c = ParseCampaign(kGood);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->id(), "kda-3x");
  EXPECT_EQ(c->goal().min_speedup(), 3);
  ASSERT_EQ(c->proposers_size(), 3);
  EXPECT_EQ(c->proposers(0).knob_search().finalists(), 2);
  EXPECT_EQ(c->proposers(2).external_command().argv(0), "./propose.sh");
}

TEST(CampaignSpecTest, ParseErrorsNameTheField) {
  absl::StatusOr<v1::Campaign> c =
      ParseCampaign(R"({"id": "x", "goal": {"metric": "m", "min_spedup": 2}})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("goal.min_spedup: unknown field"));
  EXPECT_THAT(c.status().message(), HasSubstr("min_speedup"));  // The fields it has.
  c = ParseCampaign(R"({"id": "x", "budget": {"max_experiments": "many"}})");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("budget.max_experiments"));
  c = ParseCampaign("{\"id\": ");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("invalid JSON"));
}

TEST(CampaignSpecTest, EveryProblemIsReportedWithItsPath) {
  v1::Campaign c;
  c.set_id("Not An Id");
  c.mutable_goal()->set_min_speedup(0.9);
  c.add_proposers()->mutable_knob_search()->set_space("../outside.json");
  c.add_proposers();
  c.add_proposers()->mutable_external_command()->set_timeout_s(-1);
  std::vector<std::string> fields;
  for (const FieldError& e : CampaignErrors(c)) fields.push_back(e.field);
  EXPECT_THAT(fields, ::testing::UnorderedElementsAre(
                          "id", "repo", "branch", "goal.metric", "goal.min_speedup",
                          "budget.max_experiments", "proposers[0].knob_search.space",
                          "proposers[1]", "proposers[2].external_command.argv",
                          "proposers[2].external_command.timeout_s"));
  absl::Status s = ValidateCampaign(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("proposers[1]: set one of knob_search"));
}

}  // namespace
}  // namespace densegate
