// int8_tile_matmul.h's promise, that the int8 key products give the same bits on every
// path: queries quantised (query_codes-inl.h) against int8 K^T panels, by the Highway
// tile product on every SIMD target this CPU supports (the codes widened to float),
// by the AVX512_VNNI kernel (skipped without it) and by the AVX2 one, each against
// the exact integer sum in 64 bits times the row's scale, bit for bit. Every row
// count of the integer kernels' row blocks and their remainders, every strip width,
// depths from one channel pair to 1040, keys in separate pages, and the largest sums
// the code limit allows (every product at +-127 * limit, the sums one short of 2^24).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "tests/kernel/int8_tile_matmul_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>
#include <vector>

#include "hwy/highway.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {

// The kernel's Highway path: C = scale_i * (codes A) B, panel by panel, the codes
// given as floats.
void Int8KeyProductForTest(size_t rows, size_t panels, size_t depth,
                           const float* code_values, const float* scales,
                           const int8_t* const* b_panels, float* c) {
  const hwy::HWY_NAMESPACE::ScalableTag<float> d;
  const size_t n = panels * internal::kPanelWidth;
  for (size_t p = 0; p < panels; ++p) {
    TileMatMul(d, CodesLoader<int8_t>(), rows, internal::kPanelWidth, depth, code_values,
               depth, b_panels[p], depth, c + p * internal::kPanelWidth, n,
               /*accumulate=*/false, nullptr);
  }
  for (size_t i = 0; i < rows; ++i) ScaleRow(d, c + i * n, n, scales[i]);
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <cstring>
#include <random>

#include "hwy/tests/hwy_gtest.h"
#include "src/base/cpu_features.h"
#include "src/kernel/int8_tile_matmul.h"
#include "src/kv/kv_pages.h"

namespace mha {
HWY_EXPORT(Int8KeyProductForTest);
}  // namespace mha

namespace {

using mha::internal::kPanelWidth;
using mha::internal::PanelOffset;
using mha::internal::QueryCodeLimit;

// One product's operands and its exact result: query codes within the limit, one
// scale per row, K^T panels each in its own page, and scale * float(integer sum).
struct Case {
  size_t rows, panels, depth;
  std::vector<int16_t> codes;  // [rows, depth]
  std::vector<float> code_values, scales;
  std::vector<std::vector<int8_t>> pages;
  std::vector<const int8_t*> panel_pointers;
  std::vector<float> expected;  // [rows, panels * kPanelWidth]

  // extreme: every product at +-127 * limit, with signs that add up.
  Case(size_t rows_, size_t panels_, size_t depth_, uint32_t seed, bool extreme)
      : rows(rows_), panels(panels_), depth(depth_) {
    std::mt19937 rng(seed);
    const int32_t limit = QueryCodeLimit(depth);
    std::uniform_int_distribution<int32_t> code(-limit, limit), key(-127, 127);
    std::uniform_real_distribution<float> scale(1e-3f, 2.0f);
    for (size_t i = 0; i < rows * depth; ++i) {
      const int32_t c = extreme ? (i % 3 == 0 ? -limit : limit) : code(rng);
      codes.push_back(static_cast<int16_t>(c));
      code_values.push_back(static_cast<float>(c));
    }
    for (size_t i = 0; i < rows; ++i) scales.push_back(scale(rng));
    const size_t n = panels * kPanelWidth;
    std::vector<int32_t> keys(depth * n);  // row-major
    for (size_t k = 0; k < depth; ++k) {
      for (size_t j = 0; j < n; ++j) {
        keys[k * n + j] =
            extreme ? (j % 2 == 0 ? 127 : -127) * (k % 3 == 0 ? -1 : 1) : key(rng);
      }
    }
    for (size_t p = 0; p < panels; ++p) {
      pages.emplace_back(depth * kPanelWidth);
      for (size_t k = 0; k < depth; ++k) {
        for (size_t j = 0; j < kPanelWidth; ++j) {
          pages[p][PanelOffset(k, j, depth)] =
              static_cast<int8_t>(keys[k * n + p * kPanelWidth + j]);
        }
      }
    }
    for (const auto& page : pages) panel_pointers.push_back(page.data());
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (size_t k = 0; k < depth; ++k)
          sum += int64_t{codes[i * depth + k]} * keys[k * n + j];
        EXPECT_LT(sum < 0 ? -sum : sum, int64_t{1} << 24);
        expected.push_back(static_cast<float>(sum) * scales[i]);
      }
    }
  }
};

void ExpectBits(const std::vector<float>& got, const Case& c, const char* path) {
  ASSERT_EQ(got.size(), c.expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &c.expected[i], sizeof(float)), 0)
        << path << ": rows " << c.rows << " panels " << c.panels << " depth " << c.depth
        << " element " << i << ": " << got[i] << " against " << c.expected[i];
  }
}

template <class Run>
void ForEveryCase(const Run& run) {
  uint32_t seed = 1;
  for (const size_t rows : {1, 2, 3, 4, 5, 8, 13, 48}) {
    for (const size_t panels : {1, 3, 4, 5, 8}) {
      for (const size_t depth : {2, 6, 64, 128})
        run(Case(rows, panels, depth, ++seed, false));
    }
  }
  for (const size_t depth : {2, 64, 128, 576, 1040}) {
    for (const bool extreme : {false, true}) run(Case(5, 6, depth, ++seed, extreme));
  }
}

class Int8KeyProducts : public hwy::TestWithParamTarget {};
HWY_TARGET_INSTANTIATE_TEST_SUITE_P(Int8KeyProducts);

TEST_P(Int8KeyProducts, HighwayPathSumsExactly) {
  ForEveryCase([](const Case& c) {
    std::vector<float> got(c.expected.size());
    HWY_DYNAMIC_DISPATCH(mha::Int8KeyProductForTest)
    (c.rows, c.panels, c.depth, c.code_values.data(), c.scales.data(),
     c.panel_pointers.data(), got.data());
    ExpectBits(got, c, "Highway");
  });
}

// An integer kernel (int8_tile_matmul.h) over every case, each panel its own ahead.
void ExpectIntegerKernelSumsExactly(decltype(&mha::internal::Int8TileMatMulAvx2) kernel,
                                    const char* path) {
  ForEveryCase([&](const Case& c) {
    std::vector<float> got(c.expected.size());
    kernel(c.rows, c.panels, c.depth, c.codes.data(), c.depth, c.scales.data(),
           c.panel_pointers.data(), c.panel_pointers.data(), got.data(),
           c.panels * kPanelWidth);
    ExpectBits(got, c, path);
  });
}

TEST(Int8KeyProductsVnni, SumsExactlyAsTheHighwayPath) {
  if (!mha::internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512_VNNI and VBMI";
  ExpectIntegerKernelSumsExactly(mha::internal::Int8TileMatMulVnni, "AVX512_VNNI");
}

TEST(Int8KeyProductsAvx2, SumsExactlyAsTheHighwayPath) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) GTEST_SKIP() << "no AVX2";
  ExpectIntegerKernelSumsExactly(mha::internal::Int8TileMatMulAvx2, "AVX2");
}

TEST(Int8KeyProductsVnni, CodeLimitKeepsSumsBelowTwoToThe24) {
  for (const size_t depth : {1, 2, 64, 128, 576, 1040, 4096}) {
    const int64_t limit = QueryCodeLimit(depth);
    EXPECT_GE(limit, 1);
    EXPECT_LE(limit, 32767);
    EXPECT_LT(limit * 127 * static_cast<int64_t>(depth), int64_t{1} << 24) << depth;
  }
  EXPECT_EQ(QueryCodeLimit(128), 1032);
}

}  // namespace
#endif  // HWY_ONCE
