// CPU features Highway 1.0.3 does not report, read from CPUID: the instructions of
// the narrow per-ISA kernels beside the Highway ones (src/kernel/bf16_tile_matmul.h).
#pragma once

namespace mha::internal {

// AVX512_BF16 (vdpbf16ps): CPUID leaf 7, sub-leaf 1, EAX bit 5. Callers run it only
// from an AVX-512 Highway target, which has checked AVX512F/BW and the OS's zmm state.
bool CpuHasAvx512Bf16();

// AVX512_VNNI (vpdpwssd: CPUID leaf 7 ECX bit 11), the int8 products' instruction
// (src/kernel/int8_tile_matmul.h). As above, only from an AVX-512 Highway target.
bool CpuHasAvx512Vnni();

// AMX-TILE and AMX-BF16 (tdpbf16ps): CPUID leaf 7, EDX bits 24 and 22, the OS
// saving tile state (XCR0 bits 17 and 18), and Linux granting this process the tile
// data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once; without it the first tile
// instruction faults).
bool CpuHasAmxBf16();

}  // namespace mha::internal
