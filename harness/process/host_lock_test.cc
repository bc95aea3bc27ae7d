#include "harness/process/host_lock.h"

#include <cstdlib>
#include <future>

#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace densegate::harness {
namespace {

using test::TestTmpDir;

using Mode = HostLock::Mode;

std::unique_ptr<HostLock> Open() {
  absl::StatusOr<std::unique_ptr<HostLock>> lock =
      HostLock::Open(TestTmpDir() + "/host.lock");
  EXPECT_TRUE(lock.ok()) << lock.status();
  return lock.ok() ? *std::move(lock) : nullptr;
}

// Two nodes on one host: shared work overlaps, a measured run is alone.
TEST(HostLockTest, MeasuredRunsExcludeEverythingElse) {
  std::unique_ptr<HostLock> a = Open(), b = Open();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  {
    HostLock::Guard building(a.get(), Mode::kShared);
    EXPECT_TRUE(b->TryAcquire(Mode::kShared)) << "two builds may overlap";
    b->Release();
    EXPECT_FALSE(b->TryAcquire(Mode::kExclusive)) << "a measurement waits for the build";
  }
  {
    HostLock::Guard measuring(a.get(), Mode::kExclusive);
    EXPECT_FALSE(b->TryAcquire(Mode::kShared));
    EXPECT_FALSE(b->TryAcquire(Mode::kExclusive));
  }
  EXPECT_TRUE(b->TryAcquire(Mode::kExclusive));
  b->Release();
  HostLock::Guard none(nullptr, Mode::kExclusive);  // A node alone: no lock.
}

// An exclusive request waiting for a shared holder blocks newcomers (the
// turnstile), so a stream of builds cannot starve a measurement.
TEST(HostLockTest, AWaitingMeasurementGoesBeforeNewSharedWork) {
  std::unique_ptr<HostLock> a = Open(), b = Open(), c = Open();
  ASSERT_NE(c, nullptr);
  a->TryAcquire(Mode::kShared);
  std::future<void> measured = std::async(std::launch::async, [&] {
    HostLock::Guard g(b.get(), Mode::kExclusive);
  });
  // Wait until b sits in the turnstile: then a newcomer cannot pass it.
  while (c->TryAcquire(Mode::kShared)) c->Release();
  EXPECT_FALSE(c->TryAcquire(Mode::kShared));
  a->Release();
  measured.get();  // b got its turn and released it.
  EXPECT_TRUE(c->TryAcquire(Mode::kShared));
  c->Release();
}

}  // namespace
}  // namespace densegate::harness
