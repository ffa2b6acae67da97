// Internal side of include/mha/isa.hpp: every entry point that may create a oneDNN
// primitive or dispatch a Highway kernel first applies the ISA cap.
#pragma once

#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

namespace mha::internal {

// Applies MHA_MAX_ISA once per process unless SetMaxIsa already ran; cheap after.
void ApplyIsaCap();

// A CPU engine created after the cap.
dnnl::engine CpuEngine();

// Whether attention over bf16 pages runs AVX512_BF16 dot products here: the
// dispatched Highway target is AVX-512 (not capped below) and the CPU has them.
bool Bf16DotProductsRun();

// Whether the cap leaves AMX to mha's bf16 tile products: only "native" does, as
// for oneDNN ("avx512" stops short of AMX). Cheap: read per tile product.
bool CapAllowsAmx();

// Remembers a projection primitive's oneDNN implementation name for DescribeIsa.
void RecordProjectionKernel(const char* implementation);
// What DescribeIsa reports: the projections' implementations so far, oneDNN's
// effective ISA and Highway's dispatched target (after the cap).
std::vector<std::string> ProjectionKernels();
const char* OnednnIsaName();
const char* SimdTargetName();

}  // namespace mha::internal
