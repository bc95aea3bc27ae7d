#include "scheduler/auth.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/tokens.h"
#include "testing/test_util.h"

namespace densegate::scheduler {
namespace {

using test::TestTmpDir;

using ::testing::HasSubstr;

std::string Line(const std::string& role, const std::string& token, const std::string& who) {
  return role + " sha256:" + HashToken(token) + " " + who + "\n";
}

absl::StatusCode Code(const Authenticator& a, const std::string& token,
                      std::initializer_list<Role> allowed) {
  return a.AuthorizeBearer("Bearer " + token, allowed).status().code();
}

TEST(TokensTest, HashIsSha256Hex) {
  EXPECT_EQ(HashToken("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  absl::StatusOr<std::string> a = NewToken(), b = NewToken();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 3u + 64u);
  EXPECT_NE(*a, *b);
}

TEST(TokensTest, ParsesHashesAndRejectsBadLines) {
  auto ok = ParseTokens("# roles\n" + Line("ci", "ci-token", "ci") + "\n" +
                        Line("agent", "agent-token", "agent:campaign-7") +
                        Line("node", "node-token", "node-a"));
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 3u);
  EXPECT_EQ((*ok)[2].principal, "node-a");
  EXPECT_EQ((*ok)[2].role, Role::kNode);

  auto bad_role = ParseTokens("root sha256:" + HashToken("x") + "\n");
  EXPECT_THAT(bad_role.status().message(), HasSubstr("line 1: unknown role"));
  // A token in plain text: refused, and the message gives the line to write.
  auto plain = ParseTokens("\nci ci-token-123 ci:bot\n");
  EXPECT_THAT(plain.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(plain.status().message(),
              HasSubstr("ci sha256:" + HashToken("ci-token-123") + " ci:bot"));
  auto short_hash = ParseTokens("ci sha256:abcd\n");
  EXPECT_THAT(short_hash.status().message(), HasSubstr("64 lowercase hex"));
  auto anonymous_node = ParseTokens("node sha256:" + HashToken("n") + "\n");
  EXPECT_THAT(anonymous_node.status().message(), HasSubstr("names the node"));
  auto twice = ParseTokens(Line("ci", "same", "a") + Line("agent", "same", "b"));
  EXPECT_THAT(twice.status().message(), HasSubstr("line 2: the same token twice"));
}

TEST(AuthTest, RolesAndPrincipals) {
  auto a = Authenticator::FromText(Line("ci", "ci-token", "ci:bot") +
                                   Line("viewer", "viewer-token", "viewer") +
                                   Line("admin", "admin-token", "admin:ops"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->open());
  absl::StatusOr<Principal> ci = a->AuthorizeBearer("Bearer ci-token", {Role::kCi});
  ASSERT_TRUE(ci.ok());
  EXPECT_EQ(ci->name, "ci:bot");
  EXPECT_EQ(Code(*a, "viewer-token", {Role::kCi}), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Code(*a, "admin-token", {Role::kNode}), absl::StatusCode::kOk);
  EXPECT_EQ(Code(*a, "guess", {Role::kCi}), absl::StatusCode::kUnauthenticated);
  // The file holds hashes: presenting a hash is not presenting the token.
  EXPECT_EQ(Code(*a, HashToken("ci-token"), {Role::kCi}), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(a->AuthorizeBearer("", {Role::kCi}).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Authenticator().open());
  // A file with every token revoked lets nobody in (it is not "open").
  auto none = Authenticator::FromText("# all revoked\n");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->open());
  EXPECT_EQ(Code(*none, "ci-token", {Role::kCi}), absl::StatusCode::kUnauthenticated);
}

TEST(AuthTest, CreatedTokensWorkAndRevokedOnesStopWithoutARestart) {
  const std::string path = TestTmpDir() + "/" + "tokens-revoke";
  std::remove(path.c_str());
  absl::StatusOr<std::string> ci = CreateToken(path, Role::kCi, "ci:bot");
  absl::StatusOr<std::string> node_a = CreateToken(path, Role::kNode, "node-a");
  absl::StatusOr<std::string> node_b = CreateToken(path, Role::kNode, "node-b");
  ASSERT_TRUE(ci.ok() && node_a.ok() && node_b.ok()) << ci.status() << node_a.status();
  EXPECT_FALSE(CreateToken(path, Role::kNode, "").ok()) << "a node token names its node";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find(*ci), std::string::npos) << "the token itself is never stored";

  auto a = Authenticator::FromFile(path, absl::ZeroDuration());
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<Principal> who = a->AuthorizeBearer("Bearer " + *node_a, {Role::kNode});
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->name, "node-a");

  absl::StatusOr<int> revoked = RevokeTokens(path, "node-a");
  ASSERT_TRUE(revoked.ok()) << revoked.status();
  EXPECT_EQ(*revoked, 1);
  EXPECT_EQ(Code(*a, *node_a, {Role::kNode}), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Code(*a, *node_b, {Role::kNode}), absl::StatusCode::kOk);
  // By a hash prefix, as `token list` shows it.
  ASSERT_TRUE(RevokeTokens(path, "sha256:" + HashToken(*ci).substr(0, 12)).ok());
  EXPECT_EQ(Code(*a, *ci, {Role::kCi}), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(RevokeTokens(path, "nobody").status().code(), absl::StatusCode::kNotFound);

  // A hand edit that breaks the file keeps the tokens read before.
  std::ofstream(path, std::ios::app) << "ci not-a-hash\n";
  EXPECT_EQ(Code(*a, *node_b, {Role::kNode}), absl::StatusCode::kOk);
}

}  // namespace
}  // namespace densegate::scheduler
