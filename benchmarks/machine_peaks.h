// The machine's reachable peaks, which mha_bench's ratios are taken against:
// BM_GemmPeak (fp32 oneDNN GEMM), BM_AmxPeak (the AMX tile rate), BM_StreamCopy and
// BM_StreamRead (memory bandwidth on every core).
#pragma once

#include <cstdint>

namespace mha::bench {

void RegisterMachinePeaks();

// The sum of data[0, count), read with the widest vectors the ISA cap allows.
float SumFloats(const float* data, int64_t count);

// `steps` times four full-depth tdpbf16ps on one thread (amx_tile_loop.cc); writes
// one result to *sink so that nothing is optimised away.
void AmxTileLoop(int64_t steps, float* sink);

}  // namespace mha::bench
