// ThreadPlacement: kSpread pins each team thread but the caller to a CPU of its own
// and leaves the caller's mask alone; kUnbound gives the pinned threads their masks
// back; a team larger than the allowed set stays unpinned; results never change.
#include <gtest/gtest.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <vector>

#include "mha/mha.hpp"
#include "tests/test_util.h"

namespace mha::testing {
namespace {

cpu_set_t OwnMask() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  pthread_getaffinity_np(pthread_self(), sizeof(mask), &mask);
  return mask;
}

// A core call on `threads` threads; its output.
std::vector<float> RunCore(int threads) {
  const int64_t batch = 1, heads = 8, seq = 96, dim = 16;
  const std::vector<float> q = RandomFloats(batch * heads * seq * dim, 1);
  const std::vector<float> k = RandomFloats(batch * heads * seq * dim, 2);
  const std::vector<float> v = RandomFloats(batch * heads * seq * dim, 3);
  std::vector<float> out(q.size());
  const Shape shape{batch, heads, seq, dim};
  CoreOptions options;
  options.num_threads = threads;
  ScaledDotProductAttention(TensorView(q.data(), shape), TensorView(k.data(), shape),
                            TensorView(v.data(), shape), {},
                            MutableTensorView(out.data(), shape), options);
  return out;
}

// The number of CPUs each thread of a team of `threads` (the pool the core used) may
// run on.
std::vector<int> TeamMaskSizes(int threads) {
  std::vector<int> sizes(threads);
#pragma omp parallel num_threads(threads)
  {
    const cpu_set_t mask = OwnMask();
    sizes[omp_get_thread_num()] = CPU_COUNT(&mask);
  }
  return sizes;
}

class ThreadPlacementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (omp_get_proc_bind() != omp_proc_bind_false) GTEST_SKIP() << "OMP_PROC_BIND set";
    const cpu_set_t mask = OwnMask();
    allowed_ = CPU_COUNT(&mask);
    if (allowed_ < 2) GTEST_SKIP() << "one CPU allowed";
  }
  void TearDown() override { SetThreadPlacement(ThreadPlacement::kSpread); }
  int allowed_ = 0;
};

TEST(ThreadPlacementNames, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(ParseThreadPlacement("spread"), ThreadPlacement::kSpread);
  EXPECT_EQ(ParseThreadPlacement("unbound"), ThreadPlacement::kUnbound);
  ExpectErrorMentioning([] { ParseThreadPlacement("close", "name"); },
                        "name: expected one of spread, unbound, got 'close'");
}

TEST_F(ThreadPlacementTest, SpreadPinsTheTeamButNotTheCallerAndUnboundReleases) {
  EXPECT_EQ(GetThreadPlacement(), ThreadPlacement::kSpread);  // the default
  const cpu_set_t caller_before = OwnMask();
  const std::vector<float> spread = RunCore(2);
  const cpu_set_t caller_after = OwnMask();
  EXPECT_TRUE(CPU_EQUAL(&caller_before, &caller_after));
  std::vector<int> sizes = TeamMaskSizes(2);
  EXPECT_EQ(sizes[0], allowed_);
  EXPECT_EQ(sizes[1], 1);

  SetThreadPlacement(ThreadPlacement::kUnbound);
  const std::vector<float> unbound = RunCore(2);
  sizes = TeamMaskSizes(2);
  EXPECT_EQ(sizes[1], allowed_);
  EXPECT_EQ(spread, unbound);
}

TEST_F(ThreadPlacementTest, TeamLargerThanTheAllowedSetStaysUnpinned) {
  RunCore(2);  // pins thread 1, which the larger team then releases
  const int threads = allowed_ + 1;
  RunCore(threads);
  for (const int size : TeamMaskSizes(threads)) EXPECT_EQ(size, allowed_);
}

}  // namespace
}  // namespace mha::testing
