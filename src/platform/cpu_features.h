// CPU features Highway 1.0.3 does not report, read from CPUID: the instructions of
// the narrow per-ISA kernels beside the Highway ones (src/kernels/bf16_tile_matmul.h).
#pragma once

namespace mha::internal {

// AVX512_BF16 (vdpbf16ps): CPUID leaf 7, sub-leaf 1, EAX bit 5. Callers run it only
// from an AVX-512 Highway target, which has checked AVX512F/BW and the OS's zmm state.
bool CpuHasAvx512Bf16();

}  // namespace mha::internal
