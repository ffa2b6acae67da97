// BlockPool read directly: a fresh pool hands out blocks in order, shared blocks are
// counted while two or more sequences hold them, a block is free again only when its
// last reference goes, and a freed block is the next one handed out.
#include <gtest/gtest.h>

#include "src/cache/block_pool.h"

namespace mha::internal {
namespace {

TEST(BlockPool, ReferencesDecideWhenABlockIsFree) {
  BlockPool pool(4);
  EXPECT_EQ(pool.num_blocks(), 4);
  EXPECT_EQ(pool.free_blocks(), 4);
  for (int32_t expected = 0; expected < 3; ++expected) {
    EXPECT_EQ(pool.Allocate(), expected);
    EXPECT_EQ(pool.references(expected), 1);
  }
  EXPECT_EQ(pool.free_blocks(), 1);
  pool.Share(1);
  pool.Share(1);
  EXPECT_EQ(pool.references(1), 3);
  EXPECT_EQ(pool.shared_blocks(), 1);
  pool.Release(1);
  EXPECT_EQ(pool.shared_blocks(), 1);
  pool.Release(1);
  EXPECT_EQ(pool.shared_blocks(), 0);
  EXPECT_EQ(pool.free_blocks(), 1);
  pool.Release(1);
  EXPECT_EQ(pool.references(1), 0);
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_EQ(pool.Allocate(), 1);  // the freed block comes back first
  EXPECT_EQ(pool.Allocate(), 3);
  EXPECT_EQ(pool.free_blocks(), 0);
}

}  // namespace
}  // namespace mha::internal
