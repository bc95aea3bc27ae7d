#include "scheduler/auth.h"

#include "gtest/gtest.h"

namespace densegate::scheduler {
namespace {

TEST(AuthTest, ParsesRolesAndRejectsBadLines) {
  auto a = Authenticator::FromText(
      "# roles\nci ci-token-123\nagent agent-token-1 agent:campaign-7\n\nadmin admin-token-9\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->open());
  auto bad_role = Authenticator::FromText("root tok-123456\n");
  EXPECT_NE(bad_role.status().message().find("line 1"), std::string::npos);
  EXPECT_NE(bad_role.status().message().find("unknown role"), std::string::npos);
  auto short_token = Authenticator::FromText("ci\nci abc\n");
  EXPECT_FALSE(short_token.ok());
  auto dup = Authenticator::FromText("ci token-aaaa1\nagent token-aaaa1\n");
  EXPECT_NE(dup.status().message().find("duplicate"), std::string::npos);
  EXPECT_TRUE(Authenticator().open());
}

}  // namespace
}  // namespace densegate::scheduler
