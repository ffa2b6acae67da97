// The bf16 product path a bitwise suite runs on (tests/CMakeLists.txt registers the
// determinism and batch-invariance suites once per path, MHA_TEST_PRODUCT_PATH naming
// it, under the ISA cap that selects it): where this CPU computes on another path
// under that cap, every test of the entry is skipped, saying which path is missing,
// so a machine without AMX or AVX512_BF16 reports those paths as not run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mha/isa.hpp"

namespace {

class ProductPathEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* wanted = std::getenv("MHA_TEST_PRODUCT_PATH");
    if (wanted == nullptr) return;
    const mha::IsaReport isa = mha::DescribeIsa();
    const std::string actual = isa.amx_tiles           ? "amx_tiles"
                               : isa.bf16_dot_products ? "avx512_bf16"
                                                       : "fp32_products";
    if (actual != wanted) {
      GTEST_SKIP() << "bf16 product path " << wanted << " not on this CPU under its cap "
                   << "(it computes " << actual << ", SIMD target " << isa.simd_target
                   << ")";
    }
  }
};

const ::testing::Environment* const kProductPath =
    ::testing::AddGlobalTestEnvironment(new ProductPathEnvironment);

}  // namespace
