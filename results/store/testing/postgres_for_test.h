// The one way a GoogleTest test gets a fresh PostgreSQL database: on the
// server named by DENSEGATE_PG_URL, named after the running test. Without
// that variable the test is skipped, or fails under CI=true (where the
// PostgreSQL tests must run: .ci/run starts a server for them).
//
// Test-only; call from a test's SetUp() or body, on the test's thread.
#ifndef DENSEGATE_RESULTS_STORE_TESTING_POSTGRES_FOR_TEST_H_
#define DENSEGATE_RESULTS_STORE_TESTING_POSTGRES_FOR_TEST_H_

#include <memory>

#include "results/store/testing/test_database.h"

namespace densegate::results::testing {

// Sets `*db` to the new database. Leaves it null after skipping the test or
// recording a fatal failure (no URL, or the database could not be made);
// the caller then returns at once, and GoogleTest runs no test body.
void CreatePostgresForThisTest(std::unique_ptr<TestDatabase>* db);

}  // namespace densegate::results::testing

#endif  // DENSEGATE_RESULTS_STORE_TESTING_POSTGRES_FOR_TEST_H_
