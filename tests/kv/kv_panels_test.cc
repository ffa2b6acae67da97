// kv_panels-inl.h on every SIMD target this CPU supports: keys split into K^T key
// blocks and values into V pages (column panels, src/kv/kv_pages.h), as float and
// as bfloat16, read back element by element through PanelOffset. Odd head sizes,
// block sizes of 16 to 64, ranges that start inside a block, empty ranges and zeroed
// tails; nothing outside [first, zero_end) is written.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kv/kv_panels_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstring>
#include <vector>

#include "hwy/highway.h"
#include "src/kv/kv_panels-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

template <typename T>
void SplitForTest(const float* src, size_t stride, size_t first, size_t rows,
                  size_t zero_end, size_t head_dim, size_t padded_head_dim, T* keys,
                  T* values, size_t block) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  SplitKeysTransposed(d, src, stride, first, rows, zero_end, head_dim, keys, block);
  SplitValues(d, src, stride, first, rows, zero_end, head_dim, padded_head_dim, values,
              block);
}

void SplitFloatForTest(const float* src, size_t stride, size_t first, size_t rows,
                       size_t zero_end, size_t head_dim, size_t padded_head_dim,
                       float* keys, float* values, size_t block) {
  SplitForTest(src, stride, first, rows, zero_end, head_dim, padded_head_dim, keys,
               values, block);
}

void SplitBf16ForTest(const float* src, size_t stride, size_t first, size_t rows,
                      size_t zero_end, size_t head_dim, size_t padded_head_dim,
                      uint16_t* keys, uint16_t* values, size_t block) {
  SplitForTest(src, stride, first, rows, zero_end, head_dim, padded_head_dim,
               reinterpret_cast<hwy::bfloat16_t*>(keys),
               reinterpret_cast<hwy::bfloat16_t*>(values), block);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "hwy/tests/hwy_gtest.h"
#include "src/simd/bf16_convert.h"
#include "tests/test_util.h"

namespace mha {
HWY_EXPORT(SplitFloatForTest);
HWY_EXPORT(SplitBf16ForTest);
}  // namespace mha

namespace {

using mha::internal::PairedOffset;
using mha::internal::PanelOffset;

constexpr size_t kPanel = mha::internal::kPanelWidth;
constexpr float kUntouched = -9.0f;

struct Split {
  size_t head_dim, padded_head_dim, block, first, rows, zero_end;
  bool paired = false;  // bfloat16 tiles pair their rows (src/kv/kv_pages.h)
  size_t stored_head_dim() const { return paired ? (head_dim + 1) / 2 * 2 : head_dim; }
  size_t keys_size() const {
    return (zero_end + block) / block * block * stored_head_dim();
  }
  size_t values_size() const {
    return (zero_end + block) / block * block * padded_head_dim;
  }
  // Where key j's dimension k, and value j's column k, are stored.
  size_t KeyAt(size_t j, size_t k) const {
    const size_t block_start = j / block * block;
    return block_start * stored_head_dim() + Offset(k, j - block_start, head_dim);
  }
  size_t ValueAt(size_t j, size_t k) const {
    return j / block * block * padded_head_dim + Offset(j % block, k, block);
  }
  size_t Offset(size_t row, size_t col, size_t tile_rows) const {
    return paired ? PairedOffset(row, col, tile_rows) : PanelOffset(row, col, tile_rows);
  }
};

// What the split must leave at key/value j, column k: the source (rounded to the
// storage), zero in the padding, untouched outside [first, zero_end).
template <class Store>
void ExpectSplit(const Split& s, const std::vector<float>& src, size_t stride,
                 const Store& stored_as, const std::vector<float>& keys,
                 const std::vector<float>& values) {
  for (size_t j = 0; j < s.zero_end + s.block && j / s.block * s.block < s.zero_end;
       ++j) {
    const bool written = j >= s.first && j < s.zero_end, copied = j < s.first + s.rows;
    for (size_t k = 0; k < s.padded_head_dim; ++k) {
      const float source = written && copied && k < s.head_dim
                               ? stored_as(src[(j - s.first) * stride + k])
                               : 0.0f;
      if (k < s.head_dim) {
        ASSERT_EQ(keys[s.KeyAt(j, k)], written ? source : kUntouched)
            << "key " << j << "," << k;
      }
      ASSERT_EQ(values[s.ValueAt(j, k)], written ? source : kUntouched)
          << "value " << j << "," << k;
    }
  }
}

float Bf16Float(uint16_t bits) {
  const uint32_t wide = uint32_t{bits} << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

std::vector<Split> Splits() {
  std::vector<Split> splits;
  for (const size_t head_dim : {1, 3, 16, 17, 40}) {
    const size_t padded = (head_dim + kPanel - 1) / kPanel * kPanel;
    for (const size_t block : {16, 32, 64}) {
      for (const size_t first : {0, 5, 16, 33}) {
        for (const size_t rows : {0, 1, 7, 40}) {
          const size_t end = first + rows;
          splits.push_back({head_dim, padded, block, first, rows,
                            (end + kPanel - 1) / kPanel * kPanel});
          splits.push_back({head_dim, padded, block, first, rows, end + 2 * kPanel});
        }
      }
    }
  }
  return splits;
}

class KvPanels : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(KvPanels);

TEST_P(KvPanels, FloatPanelsHoldTheRowsAndZeros) {
  for (const Split& s : Splits()) {
    const size_t stride = s.head_dim + 3;
    const std::vector<float> src =
        mha::testing::RandomFloats(std::max<size_t>(s.rows, 1) * stride, 7);
    std::vector<float> keys(s.keys_size(), kUntouched),
        values(s.values_size(), kUntouched);
    HWY_DYNAMIC_DISPATCH(mha::SplitFloatForTest)
    (src.data(), stride, s.first, s.rows, s.zero_end, s.head_dim, s.padded_head_dim,
     keys.data(), values.data(), s.block);
    SCOPED_TRACE(testing::Message()
                 << "head_dim " << s.head_dim << " block " << s.block << " first "
                 << s.first << " rows " << s.rows << " zero_end " << s.zero_end);
    ExpectSplit(
        s, src, stride, [](float v) { return v; }, keys, values);
  }
}

TEST_P(KvPanels, Bf16PanelsHoldTheRoundedRows) {
  for (Split s : Splits()) {
    s.paired = true;
    const size_t stride = s.head_dim;
    const std::vector<float> src =
        mha::testing::RandomFloats(std::max<size_t>(s.rows, 1) * stride, 8);
    std::vector<uint16_t> key_bits(s.keys_size(), 0xC110),
        value_bits(s.values_size(), 0xC110);
    HWY_DYNAMIC_DISPATCH(mha::SplitBf16ForTest)
    (src.data(), stride, s.first, s.rows, s.zero_end, s.head_dim, s.padded_head_dim,
     key_bits.data(), value_bits.data(), s.block);
    std::vector<float> keys(key_bits.size()), values(value_bits.size());
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = Bf16Float(key_bits[i]);
    for (size_t i = 0; i < values.size(); ++i) values[i] = Bf16Float(value_bits[i]);
    SCOPED_TRACE(testing::Message() << "head_dim " << s.head_dim << " block " << s.block
                                    << " first " << s.first << " rows " << s.rows);
    ExpectSplit(
        s, src, stride,
        [](float v) { return Bf16Float(mha::internal::RoundToBf16Bits(v)); }, keys,
        values);
  }
}

}  // namespace
#endif  // HWY_ONCE
