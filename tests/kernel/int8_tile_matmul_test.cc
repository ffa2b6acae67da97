// int8_tile_matmul.h's promise, that the int8 key products give the same bits on every
// path: queries quantised (query_codes-inl.h) against int8 K^T panels, by the Highway
// tile product on every SIMD target this CPU supports (the codes widened to float),
// by the AVX512_VNNI kernel (skipped without it) and by the AVX2 one, each against
// the exact integer sum in 64 bits times the row's scale, bit for bit. Every row
// count of the integer kernels' row blocks and their remainders, every strip width,
// depths from one channel pair to 1040, keys in separate pages, and the largest sums
// the code limit allows (every product at +-127 * limit, the sums one short of 2^24).
// And P V's use of the integer kernels: probability codes against int8 V panels in
// chunks (pages), added to C, over odd key counts and the largest tile in int32.
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
#include <cmath>
#include <cstring>
#include <random>

#include "hwy/tests/hwy_gtest.h"
#include "src/base/cpu_features.h"
#include "src/base/fp16.h"
#include "src/kernel/int8_tile_matmul.h"
#include "src/kv/kv_pages.h"

namespace mha {
HWY_EXPORT(Int8KeyProductForTest);
}  // namespace mha

namespace {

using mha::internal::kPanelWidth;
using mha::internal::QueryCodeLimit;
using mha::internal::TileOffset;

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
          pages[p][TileOffset<int8_t>(k, j, depth)] =
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
           {c.panel_pointers.data(), c.panel_pointers.data(), c.depth, 1}, got.data(),
           c.panels * kPanelWidth, /*accumulate=*/false);
    ExpectBits(got, c, path);
  });
}

TEST(Int8KeyProductsVnni, SumsExactlyAsTheHighwayPath) {
  if (!mha::internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512_VNNI";
  ExpectIntegerKernelSumsExactly(mha::internal::Int8TileMatMulVnni, "AVX512_VNNI");
}

TEST(Int8KeyProductsAvx2, SumsExactlyAsTheHighwayPath) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) GTEST_SKIP() << "no AVX2";
  ExpectIntegerKernelSumsExactly(mha::internal::Int8TileMatMulAvx2, "AVX2");
}

// P V's product: probability codes within [0, kProbabilityCodeLimit] against int8
// values in chunks (one per page), added to C: C0 + float(int32 sum) * scale, bit for
// bit, over odd depths (a padding key of code 0 against a readable padding row),
// partial last chunks and the largest sums the limit allows.
struct ValueCase {
  size_t rows, panels, depth, chunk_depth, chunk_count;
  std::vector<int16_t> codes;  // [rows, lda]
  size_t lda;
  std::vector<float> scales, c;
  std::vector<std::vector<int8_t>> chunks;
  std::vector<const int8_t*> chunk_pointers;
  std::vector<float> expected;

  ValueCase(size_t rows_, size_t panels_, size_t depth_, size_t chunk_depth_,
            uint32_t seed, bool extreme)
      : rows(rows_),
        panels(panels_),
        depth(depth_),
        chunk_depth(chunk_depth_),
        chunk_count((depth_ + chunk_depth_ - 1) / chunk_depth_),
        lda(depth_ + 1) {
    std::mt19937 rng(seed);
    const int32_t limit = mha::internal::kProbabilityCodeLimit;
    std::uniform_int_distribution<int32_t> code(0, limit), value(-127, 127);
    std::uniform_real_distribution<float> real(-2.0f, 2.0f);
    for (size_t i = 0; i < rows * lda; ++i) {
      codes.push_back(static_cast<int16_t>(i % lda == depth ? 0
                                           : extreme        ? limit
                                                     : code(rng)));  // a padding key: 0
    }
    for (size_t i = 0; i < rows; ++i) scales.push_back(std::fabs(real(rng)) + 1e-3f);
    const size_t n = panels * kPanelWidth;
    for (size_t i = 0; i < rows * n; ++i) c.push_back(real(rng));
    for (size_t p = 0; p < panels; ++p) {
      for (size_t q = 0; q < chunk_count; ++q) {
        chunks.emplace_back(chunk_depth * kPanelWidth);
        for (int8_t& v : chunks.back())
          v = static_cast<int8_t>(extreme ? 127 : value(rng));
      }
    }
    for (const auto& chunk : chunks) chunk_pointers.push_back(chunk.data());
    expected = c;
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < n; ++j) {
        int64_t sum = 0;
        for (size_t k = 0; k < depth; ++k) {
          const auto& chunk = chunks[(j / kPanelWidth) * chunk_count + k / chunk_depth];
          sum += int64_t{codes[i * lda + k]} *
                 chunk[TileOffset<int8_t>(k % chunk_depth, j % kPanelWidth, chunk_depth)];
        }
        EXPECT_LT(sum < 0 ? -sum : sum, int64_t{1} << 31);
        expected[i * n + j] += static_cast<float>(sum) * scales[i];
      }
    }
  }
};

void ExpectValueProductsExact(decltype(&mha::internal::Int8TileMatMulAvx2) kernel,
                              const char* path) {
  uint32_t seed = 100;
  for (const size_t rows : {1, 3, 4, 5, 48}) {
    for (const size_t panels : {1, 3, 4, 8}) {
      for (const size_t chunk_depth : {16, 128}) {
        for (const size_t depth : {1, 2, 15, 16, 17, 100, 128}) {
          for (const bool extreme : {false, true}) {
            ValueCase v(rows, panels, depth, chunk_depth, ++seed, extreme);
            std::vector<float> got = v.c;
            kernel(v.rows, v.panels, depth + depth % 2, v.codes.data(), v.lda,
                   v.scales.data(),
                   {v.chunk_pointers.data(), v.chunk_pointers.data(), v.chunk_depth,
                    v.chunk_count},
                   got.data(), v.panels * kPanelWidth, /*accumulate=*/true);
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_EQ(std::memcmp(&got[i], &v.expected[i], sizeof(float)), 0)
                  << path << ": rows " << rows << " panels " << panels << " depth "
                  << depth << " chunks of " << chunk_depth << " element " << i << ": "
                  << got[i] << " against " << v.expected[i];
            }
          }
        }
      }
    }
  }
  // The largest key tile at the limit: 32767 x 127 x 256 in int32.
  ValueCase v(2, 1, mha::internal::kMaxKeyStep, 16, 7, true);
  std::vector<float> got = v.c;
  kernel(v.rows, v.panels, v.depth, v.codes.data(), v.lda, v.scales.data(),
         {v.chunk_pointers.data(), v.chunk_pointers.data(), 16, v.chunk_count},
         got.data(), kPanelWidth, /*accumulate=*/true);
  EXPECT_EQ(std::memcmp(got.data(), v.expected.data(), got.size() * sizeof(float)), 0)
      << path;
}

TEST(Int8ValueProductsVnni, SumsChunksExactly) {
  if (!mha::internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512_VNNI";
  ExpectValueProductsExact(mha::internal::Int8TileMatMulVnni, "AVX512_VNNI");
}

TEST(Int8ValueProductsAvx2, SumsChunksExactly) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) GTEST_SKIP() << "no AVX2";
  ExpectValueProductsExact(mha::internal::Int8TileMatMulAvx2, "AVX2");
}

// B's codes as a kind stores them: int8 (int8, q8_0) or 4-bit pairs less a zero
// (q4_0's 8, int4's 0), and whether each chunk's columns carry fp16 scales (q8_0, q4_0).
struct CodeForm {
  bool nibbles;
  int16_t zero;
  bool scaled;
};

// A chunk of chunk_depth rows x kPanelWidth codes `values` (row-major) in its form's
// layout: int8 pairs (PairedOffset) or 4-bit pairs (Int4Offset).
std::vector<int8_t> PackChunk(const std::vector<int32_t>& values, size_t chunk_depth,
                              const CodeForm& form) {
  std::vector<int8_t> chunk(chunk_depth * mha::internal::PanelPairBytes(form.nibbles) /
                            2);
  for (size_t k = 0; k < chunk_depth; ++k) {
    for (size_t j = 0; j < kPanelWidth; ++j) {
      const int32_t v = values[k * kPanelWidth + j];
      if (!form.nibbles) {
        chunk[TileOffset<int8_t>(k, j, chunk_depth)] = static_cast<int8_t>(v);
        continue;
      }
      auto& pair =
          reinterpret_cast<uint8_t&>(chunk[mha::internal::Int4Offset(k, j, chunk_depth)]);
      pair = static_cast<uint8_t>(pair | (v << (k % 2 * 4)));
    }
  }
  return chunk;
}

// K^T in groups of channels, in each code form: the exact integer sum of each chunk
// (codes less their zero), with scales converted, times its column's fp16 scale,
// summed in float in chunk order from 0, then times the row scale, bit for bit; a
// partial last group, a NaN scale (a non-finite group) reaching its column, and the
// largest query codes.
void ExpectChunksSummed(decltype(&mha::internal::Int8TileMatMulAvx2) kernel,
                        const CodeForm& form, const char* path) {
  uint32_t seed = 500;
  for (const size_t rows : {1, 3, 4, 5}) {
    for (const size_t panels : {1, 3, 4, 5}) {
      for (const size_t depth : {2, 32, 80, 128}) {
        std::mt19937 rng(++seed);
        const int32_t limit = QueryCodeLimit(depth);
        std::uniform_int_distribution<int32_t> code(-limit, limit);
        std::uniform_int_distribution<int32_t> value(form.nibbles ? 0 : -127,
                                                     form.nibbles ? 15 : 127);
        std::uniform_real_distribution<float> real(0.01f, 2.0f);
        const size_t chunk_depth = 32, count = (depth + chunk_depth - 1) / chunk_depth;
        std::vector<int16_t> a(rows * depth);
        for (int16_t& x : a) x = static_cast<int16_t>(rows == 5 ? limit : code(rng));
        std::vector<float> row_scales(rows);
        for (float& x : row_scales) x = real(rng);
        std::vector<std::vector<int32_t>> values(panels * count);
        std::vector<std::vector<int8_t>> chunks;
        std::vector<std::vector<uint16_t>> scales(panels * count);
        std::vector<const int8_t*> chunk_pointers, aheads(panels * count, nullptr);
        std::vector<const uint16_t*> scale_pointers;
        for (size_t i = 0; i < panels * count; ++i) {
          for (size_t e = 0; e < chunk_depth * kPanelWidth; ++e)
            values[i].push_back(value(rng));
          chunks.push_back(PackChunk(values[i], chunk_depth, form));
          for (size_t j = 0; j < kPanelWidth; ++j)
            scales[i].push_back(mha::internal::Fp16FromFloat(real(rng)));
        }
        if (form.scaled) scales[0][3] = mha::internal::Fp16FromFloat(NAN);
        for (size_t i = 0; i < panels * count; ++i) {
          chunk_pointers.push_back(chunks[i].data());
          scale_pointers.push_back(scales[i].data());
        }
        const size_t n = panels * kPanelWidth;
        std::vector<float> expected(rows * n), got(rows * n);
        for (size_t i = 0; i < rows; ++i) {
          for (size_t j = 0; j < n; ++j) {
            float sum = 0.0f;
            int32_t whole = 0;
            for (size_t q = 0; q < count; ++q) {
              const size_t index = (j / kPanelWidth) * count + q;
              int32_t dot = 0;
              for (size_t k = q * chunk_depth; k < std::min(depth, (q + 1) * chunk_depth);
                   ++k) {
                dot += int32_t{a[i * depth + k]} *
                       (values[index][(k % chunk_depth) * kPanelWidth + j % kPanelWidth] -
                        form.zero);
              }
              whole += dot;
              const float scaled =
                  static_cast<float>(dot) *
                  mha::internal::FloatFromFp16(scales[index][j % kPanelWidth]);
              sum = sum + scaled;
            }
            expected[i * n + j] =
                (form.scaled ? sum : static_cast<float>(whole)) * row_scales[i];
          }
        }
        kernel(rows, panels, depth, a.data(), depth, row_scales.data(),
               {chunk_pointers.data(), aheads.data(), chunk_depth, count,
                form.scaled ? scale_pointers.data() : nullptr, form.nibbles, form.zero},
               got.data(), n, /*accumulate=*/false);
        EXPECT_EQ(std::isnan(got[3]), form.scaled) << path;
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &expected[i], sizeof(float)), 0)
              << path << ": nibbles " << form.nibbles << " zero " << form.zero
              << " scaled " << form.scaled << ": rows " << rows << " panels " << panels
              << " depth " << depth << " element " << i << ": " << got[i] << " against "
              << expected[i];
        }
      }
    }
  }
}

void ExpectChunkScalesApplied(decltype(&mha::internal::Int8TileMatMulAvx2) kernel,
                              const char* path) {
  ExpectChunksSummed(kernel, {false, 0, true}, path);
}

// 4-bit codes (q4_0's less 8, int4's as they are), scaled per chunk or not.
void ExpectNibblesSummed(decltype(&mha::internal::Int8TileMatMulAvx2) kernel,
                         const char* path) {
  for (const int16_t zero : {8, 0}) {
    for (const bool scaled : {true, false})
      ExpectChunksSummed(kernel, {true, zero, scaled}, path);
  }
}

TEST(Int8KeyProductsVnni, ScalesEachChunkApiece) {
  if (!mha::internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512_VNNI";
  ExpectChunkScalesApplied(mha::internal::Int8TileMatMulVnni, "AVX512_VNNI");
}

TEST(Int8KeyProductsAvx2, ScalesEachChunkApiece) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) GTEST_SKIP() << "no AVX2";
  ExpectChunkScalesApplied(mha::internal::Int8TileMatMulAvx2, "AVX2");
}

TEST(Int8KeyProductsVnni, ReadsFourBitCodes) {
  if (!mha::internal::CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512_VNNI";
  ExpectNibblesSummed(mha::internal::Int8TileMatMulVnni, "AVX512_VNNI");
}

TEST(Int8KeyProductsAvx2, ReadsFourBitCodes) {
  if (!(hwy::SupportedTargets() & HWY_AVX2)) GTEST_SKIP() << "no AVX2";
  ExpectNibblesSummed(mha::internal::Int8TileMatMulAvx2, "AVX2");
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
