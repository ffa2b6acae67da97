// WriteKvPages into ContiguousPages, read back element by element through
// PanelOffset: strided rows of several sequences and KV heads land at their page
// positions (a run starting inside a page, across pages), the padding after the last
// row (K and V) is zeroed, nothing else is written, and V pages placed elsewhere move
// only the V pages.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "src/core/write_kv_pages.h"
#include "src/kv/contiguous_pages.h"
#include "tests/test_util.h"

namespace mha::internal {
namespace {

constexpr int64_t kSequences = 2, kKvHeads = 2, kHeadDim = 20, kPageSize = 16;
constexpr int64_t kCapacity = 64;
// [sequence, row, KV head, head_dim] rows, two floats apart between heads.
constexpr int64_t kHeadStride = kHeadDim + 2, kRowStride = kKvHeads * kHeadStride;
constexpr int64_t kRows = 40;
constexpr float kUntouched = 7.0f;

float Key(const KvPages& pages, int64_t position, int64_t k) {
  const auto* page = reinterpret_cast<const float*>(pages.KeyPage(position / kPageSize));
  return page[PanelOffset(k, position % kPageSize, kHeadDim)];
}

float Value(const KvPages& pages, int64_t position, int64_t k) {
  const auto* page =
      reinterpret_cast<const float*>(pages.ValuePage(position / kPageSize));
  return page[PanelOffset(position % kPageSize, k, kPageSize)];
}

// Fills every page with kUntouched, so that a write outside its rows shows.
void Fill(const ContiguousPages& pages) {
  for (int64_t s = 0; s < kSequences; ++s) {
    for (int64_t h = 0; h < kKvHeads; ++h) {
      const KvPages p = pages(s, h);
      for (int64_t t = 0; t < kCapacity; ++t) {
        for (int64_t k = 0; k < 32; ++k) {
          if (k < kHeadDim) {
            reinterpret_cast<float*>(p.KeyPage(
                t / kPageSize))[PanelOffset(k, t % kPageSize, kHeadDim)] = kUntouched;
          }
          reinterpret_cast<float*>(p.ValuePage(
              t / kPageSize))[PanelOffset(t % kPageSize, k, kPageSize)] = kUntouched;
        }
      }
    }
  }
}

void WriteAndCheck(ContiguousPages& pages, const std::vector<float>& keys,
                   const std::vector<float>& values) {
  const int64_t counts[kSequences] = {37, 5}, firsts[kSequences] = {3, 16};
  KvWrite write;
  write.key = {keys.data(), kRows * kRowStride, kHeadStride, kRowStride};
  write.value = {values.data(), kRows * kRowStride, kHeadStride, kRowStride};
  write.batch_end = kSequences;
  write.num_kv_heads = kKvHeads;
  write.head_dim = kHeadDim;
  write.counts = counts;
  write.first_positions = firsts;
  write.zero_padding = true;
  write.pages = pages;
  std::vector<float> scratch;
  WriteKvPages(write, scratch);
  for (int64_t s = 0; s < kSequences; ++s) {
    const int64_t end = firsts[s] + counts[s];
    const int64_t padded = (end + 15) / 16 * 16;
    for (int64_t h = 0; h < kKvHeads; ++h) {
      const KvPages p = pages(s, h);
      for (int64_t t = 0; t < kCapacity; ++t) {
        for (int64_t k = 0; k < kHeadDim; ++k) {
          const int64_t source =
              (s * kRows + t - firsts[s]) * kRowStride + h * kHeadStride + k;
          const bool written = t >= firsts[s] && t < end;
          const bool padding = t >= end && t < padded;
          const float expected_key = written ? keys[source] : padding ? 0.0f : kUntouched;
          const float expected_value = written   ? values[source]
                                       : padding ? 0.0f
                                                 : kUntouched;
          ASSERT_EQ(Key(p, t, k), expected_key) << s << " " << h << " " << t << " " << k;
          ASSERT_EQ(Value(p, t, k), expected_value)
              << s << " " << h << " " << t << " " << k;
        }
        if (t >= firsts[s] && t < padded) {  // V columns past head_dim are zero
          for (int64_t k = kHeadDim; k < 32; ++k) ASSERT_EQ(Value(p, t, k), 0.0f);
        }
      }
    }
  }
}

TEST(WriteKvPages, RowsLandAtTheirPositionsAndPaddingIsZero) {
  const std::vector<float> keys =
                               testing::RandomFloats(kSequences * kRows * kRowStride, 1),
                           values =
                               testing::RandomFloats(kSequences * kRows * kRowStride, 2);
  ContiguousPages pages;
  pages.Reset(BlockLayout(kPageSize, kKvHeads, kHeadDim, KvStorage::kFloat32), kSequences,
              kCapacity);
  EXPECT_EQ(pages.capacity(), kCapacity);
  Fill(pages);
  WriteAndCheck(pages, keys, values);

  // V pages elsewhere: sequence s's at the caller's memory + s * stride.
  const int64_t stride = pages.run_value_bytes() + 256;
  std::vector<float> elsewhere(2 * stride / sizeof(float));
  pages.Reset(BlockLayout(kPageSize, kKvHeads, kHeadDim, KvStorage::kFloat32), kSequences,
              kCapacity, reinterpret_cast<uint8_t*>(elsewhere.data()), stride);
  EXPECT_EQ(reinterpret_cast<float*>(pages(1, 0).values),
            elsewhere.data() + stride / sizeof(float));
  Fill(pages);
  WriteAndCheck(pages, keys, values);
}

}  // namespace
}  // namespace mha::internal
