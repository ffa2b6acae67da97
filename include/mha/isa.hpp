// Instruction-set control: cap what mha's SIMD kernels (Highway) and projections
// (oneDNN) may use, and report what they do use.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mha {

// The widest instruction set mha may use. kNative: everything the CPU has.
enum class Isa { kSse4, kAvx2, kAvx512, kNative };

// "sse4", "avx2", "avx512" or "native"; throws mha::Error naming `argument` and the
// accepted names otherwise.
Isa ParseIsa(std::string_view name, std::string_view argument = "isa");

// Caps both libraries, so an AVX-512 machine can measure and test the AVX2 code path.
// oneDNN fixes its ISA when it creates its first primitive: call this before the
// first layer, cache or attention call of the process. Without a call, the
// environment variable MHA_MAX_ISA (same names) is applied at that first call.
// Throws mha::Error if oneDNN has already fixed a different ISA.
void SetMaxIsa(Isa isa);

struct IsaReport {
  std::string simd_target;  // Highway's dispatched target, e.g. "AVX2"
  std::string onednn_isa;   // oneDNN's effective ISA, e.g. "avx2"
  // Attention over bf16 K/V (a bf16 cache, or compute_dtype kBFloat16) computes
  // Q K^T and P V in AVX512_BF16 dot products, queries and probabilities rounded to
  // bf16 (docs/serving.md, "bf16"); false: in fp32 on the widened bf16 values.
  bool bf16_dot_products = false;
  // Those products run on AMX tiles (tdpbf16ps; Intel Sapphire Rapids and later)
  // for blocks of 16 query rows or more, and shorter blocks (decode) in fp32 on the
  // widened bf16; needs the cap "native".
  bool amx_tiles = false;
  // oneDNN implementations of the projections created so far, e.g. "brg:avx2".
  std::vector<std::string> projection_kernels;
};

// Applies the cap (as the first call would) and says what runs.
IsaReport DescribeIsa();

}  // namespace mha
