// bf16_tile_matmul.h's kernels (AVX512_BF16 dot products, AMX tiles, and the
// product that splits between them) against a double-precision product of the same
// bfloat16 values: every row count of the micro-tile and of the AMX row blocks and
// their remainders, every strip width, odd and even depths (an odd depth's half
// pair; the AMX chunks' remainders), B tiles with more rows than the product uses,
// accumulating or not, and the NaN of an input it reads. Each kernel is skipped on
// CPUs without its instructions.
#include "src/kernel/bf16_tile_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "src/base/cpu_features.h"
#include "src/kv/kv_pages.h"
#include "src/simd/bf16_convert.h"
#include "tests/test_util.h"

namespace {

using mha::internal::PairedOffset;
using mha::internal::RoundUp;
using mha::testing::RandomFloats;

float Bf16Value(uint16_t bits) {
  float value;
  mha::internal::Bf16ToFloat(&bits, 1, &value);
  return value;
}

// A [rows, cols] bfloat16 tile with paired rows, and the values it holds.
struct PairedTile {
  std::vector<uint16_t> bits;
  std::vector<float> values;  // row-major
  size_t rows, cols;

  PairedTile(size_t rows_, size_t cols_, uint32_t seed)
      : bits(RoundUp(rows_, 2) * cols_, 0),
        values(rows_ * cols_),
        rows(rows_),
        cols(cols_) {
    const std::vector<float> random = RandomFloats(rows * cols, seed);
    for (size_t k = 0; k < rows; ++k) {
      for (size_t j = 0; j < cols; ++j) {
        const uint16_t b = mha::internal::RoundToBf16Bits(random[k * cols + j]);
        bits[PairedOffset(k, j, rows)] = b;
        values[k * cols + j] = Bf16Value(b);
      }
    }
  }
};

enum class Kernel { kAvx512Bf16, kAmxTiles, kSplit };

const char* KernelName(Kernel kernel) {
  switch (kernel) {
    case Kernel::kAvx512Bf16:
      return "Avx512Bf16";
    case Kernel::kAmxTiles:
      return "AmxTiles";
    case Kernel::kSplit:
      break;
  }
  return "AmxThenAvx512Bf16";
}

void PrintTo(Kernel kernel, std::ostream* os) { *os << KernelName(kernel); }

using Product = void (*)(size_t rows, size_t n, size_t depth, const uint16_t* a,
                         size_t lda, const uint16_t* b, size_t b_rows, float* c,
                         size_t ldc, bool accumulate, size_t amx_depth);

constexpr size_t kAmxDepths[] = {mha::internal::kAmxDepth, mha::internal::kAmxRowDepth};

class Bf16TileMatMul : public ::testing::TestWithParam<Kernel> {
 protected:
  void SetUp() override {
    if (!mha::internal::CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX512_BF16";
    if (GetParam() == Kernel::kAmxTiles && !mha::internal::CpuHasAmxBf16()) {
      GTEST_SKIP() << "no AMX-BF16";
    }
  }

  static Product Run() {
    switch (GetParam()) {
      case Kernel::kAvx512Bf16:
        return
            [](size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
               const uint16_t* b, size_t b_rows, float* c, size_t ldc, bool acc, size_t) {
              mha::internal::Bf16TileMatMulAvx512(rows, n, depth, a, lda, b, b_rows, c,
                                                  ldc, acc, nullptr);
            };
      case Kernel::kAmxTiles:
        return [](size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
                  const uint16_t* b, size_t b_rows, float* c, size_t ldc, bool acc,
                  size_t amx_depth) {
          mha::internal::Bf16TileMatMulAmx(rows, n, depth, a, lda, b, b_rows, c, ldc, acc,
                                           amx_depth, b);  // prefetching B again
        };
      case Kernel::kSplit:
        break;
    }
    return [](size_t rows, size_t n, size_t depth, const uint16_t* a, size_t lda,
              const uint16_t* b, size_t b_rows, float* c, size_t ldc, bool acc,
              size_t amx_depth) {
      mha::internal::Bf16TileMatMul(rows, n, depth, a, lda, b, b_rows, c, ldc, acc,
                                    nullptr, amx_depth);
    };
  }
};

TEST_P(Bf16TileMatMul, MatchesDoubleProductOfTheBf16Values) {
  const Product product = Run();
  for (size_t rows : {1, 5, 6, 7, 8, 13, 16, 17, 32, 33, 48}) {
    for (size_t n : {16, 32, 48, 80, 144}) {
      for (size_t depth : {1, 3, 16, 17, 32, 33, 48, 64, 128}) {
        for (size_t amx_depth : kAmxDepths) {
          if (GetParam() == Kernel::kAmxTiles && depth % amx_depth != 0) continue;
          for (size_t extra_rows : {0, 5}) {
            for (bool accumulate : {false, true}) {
              const size_t lda = RoundUp(depth, 2) + 4, ldc = n + 16;
              const PairedTile b(depth + extra_rows, n + 16, 2);
              std::vector<uint16_t> a(rows * lda);
              const std::vector<float> a_random = RandomFloats(a.size(), 1);
              for (size_t i = 0; i < a.size(); ++i) {
                // The element after an odd depth is the pair's zero half.
                a[i] = i % lda == depth ? 0 : mha::internal::RoundToBf16Bits(a_random[i]);
              }
              std::vector<float> c = RandomFloats(rows * ldc, 3), expected = c;
              for (size_t i = 0; i < rows; ++i) {
                for (size_t j = 0; j < n; ++j) {
                  double sum = accumulate ? expected[i * ldc + j] : 0.0;
                  for (size_t k = 0; k < depth; ++k) {
                    sum += double{Bf16Value(a[i * lda + k])} * b.values[k * b.cols + j];
                  }
                  expected[i * ldc + j] = static_cast<float>(sum);
                }
              }
              product(rows, n, depth, a.data(), lda, b.bits.data(), b.rows, c.data(), ldc,
                      accumulate, amx_depth);
              SCOPED_TRACE(::testing::Message()
                           << "rows " << rows << " n " << n << " depth " << depth
                           << " amx depth " << amx_depth << " b rows " << b.rows
                           << " accumulate " << accumulate);
              for (size_t i = 0; i < c.size(); ++i) {
                // Columns past n and rows' padding stay as they were.
                ASSERT_NEAR(c[i], expected[i], 2e-5 * (1.0 + std::fabs(expected[i])))
                    << "element " << i;
              }
            }
          }
        }
      }
    }
  }
}

TEST_P(Bf16TileMatMul, NaNInAnInputItReadsReachesTheProduct) {
  const size_t depth = 32, n = 32, lda = depth, rows = 9;
  PairedTile b(depth, n, 4);
  std::vector<uint16_t> a(rows * lda, mha::internal::RoundToBf16Bits(0.5f));
  b.bits[PairedOffset(7, 20, depth)] = 0x7FC0;  // a quiet NaN in column 20
  for (size_t amx_depth : kAmxDepths) {
    std::vector<float> c(rows * n, 0.0f);
    Run()(rows, n, depth, a.data(), lda, b.bits.data(), depth, c.data(), n, false,
          amx_depth);
    for (size_t i = 0; i < rows; ++i) {
      for (size_t j = 0; j < n; ++j) {
        EXPECT_EQ(std::isnan(c[i * n + j]), j == 20)
            << i << "," << j << ", amx depth " << amx_depth;
      }
    }
  }
}

// What the attention kernel's bitwise promises rest on (docs/errors.md): a row of
// Bf16TileMatMul has the same bits whatever rows share its call (the thread count,
// a prompt's chunking and a step's other sequences set them) and whatever zero
// products follow its last nonzero one, from the next multiple of the AMX depth on
// (P V: a causal block's key count, a page's padding), on whichever kernels this CPU
// and cap run, at either AMX depth.
TEST(Bf16TileMatMulBits, ARowIgnoresTheRowsBesideItAndTrailingZeroProducts) {
  if (!mha::internal::CpuHasAvx512Bf16()) GTEST_SKIP() << "no AVX512_BF16";
  const size_t n = 48, max_rows = 40, max_depth = 128;
  const PairedTile b(max_depth, n, 7);
  const std::vector<float> a_random = RandomFloats(max_rows * max_depth, 8, 3.0f);
  for (size_t amx_depth : kAmxDepths) {
    for (size_t depth : {16, 40, 64, 80, 128}) {  // the row's nonzero products
      std::vector<uint16_t> a(max_rows * max_depth, 0);
      for (size_t i = 0; i < max_rows; ++i) {
        for (size_t k = 0; k < depth; ++k) {
          a[i * max_depth + k] =
              mha::internal::RoundToBf16Bits(a_random[i * max_depth + k]);
        }
      }
      const auto product = [&](size_t row, size_t rows, size_t run_depth) {
        std::vector<float> c = RandomFloats(rows * n, 9);
        mha::internal::Bf16TileMatMul(rows, n, run_depth, a.data() + row * max_depth,
                                      max_depth, b.bits.data(), max_depth, c.data(), n,
                                      /*accumulate=*/true, nullptr, amx_depth);
        return std::vector<float>(c.begin(), c.begin() + n);  // the first row's
      };
      // A run past the last nonzero product starts at the next multiple of the AMX
      // depth, as the attention kernel's pages do.
      const size_t padded = mha::internal::RoundUp(depth, amx_depth);
      const std::vector<float> alone = product(0, 1, padded);
      for (size_t rows : {2, 5, 16, 17, 33, 40}) {
        EXPECT_EQ(product(0, rows, padded), alone)
            << "depth " << depth << ", rows " << rows << ", amx depth " << amx_depth;
      }
      for (size_t run_depth = padded; run_depth <= max_depth; run_depth += amx_depth) {
        EXPECT_EQ(product(0, 1, run_depth), alone)
            << "depth " << depth << " run to " << run_depth << ", amx depth "
            << amx_depth;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Bf16TileMatMul,
                         ::testing::Values(Kernel::kAvx512Bf16, Kernel::kAmxTiles,
                                           Kernel::kSplit),
                         [](const ::testing::TestParamInfo<Kernel>& info) {
                           return KernelName(info.param);
                         });

}  // namespace
