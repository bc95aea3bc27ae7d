// gtest assertions on absl::Status and absl::StatusOr for the store's tests:
// ASSERT_OK(expr), EXPECT_OK(expr) and ASSERT_OK_AND_ASSIGN(lhs, expr),
// which print the expression and the status on failure. (Debian's GoogleTest
// and Abseil ship no status matchers.)
//
// Test-only.
#ifndef DENSEGATE_RESULTS_STORE_TESTING_STATUS_ASSERTIONS_H_
#define DENSEGATE_RESULTS_STORE_TESTING_STATUS_ASSERTIONS_H_

#include <utility>

#include "absl/status/status.h"
#include "gtest/gtest.h"

#define ASSERT_OK(expr)                          \
  do {                                           \
    const absl::Status s_ = (expr);              \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_; \
  } while (0)

#define EXPECT_OK(expr)                          \
  do {                                           \
    const absl::Status s_ = (expr);              \
    EXPECT_TRUE(s_.ok()) << #expr << ": " << s_; \
  } while (0)

// `lhs` may declare a variable: ASSERT_OK_AND_ASSIGN(auto x, MakeX()).
#define ASSERT_OK_AND_ASSIGN(lhs, expr)                                      \
  DG_ASSERT_OK_AND_ASSIGN_IMPL_(DG_STATUS_CONCAT_(statusor_, __LINE__), lhs, \
                                expr)
#define DG_STATUS_CONCAT_INNER_(a, b) a##b
#define DG_STATUS_CONCAT_(a, b) DG_STATUS_CONCAT_INNER_(a, b)
#define DG_ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr)     \
  auto tmp = (expr);                                      \
  ASSERT_TRUE(tmp.ok()) << #expr << ": " << tmp.status(); \
  lhs = *std::move(tmp)

#endif  // DENSEGATE_RESULTS_STORE_TESTING_STATUS_ASSERTIONS_H_
