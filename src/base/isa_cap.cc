// The ISA cap (MHA_MAX_ISA, SetMaxIsa) for Highway and oneDNN, and what it leaves to
// run (core/describe_isa.cc reports it).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/base/isa_cap.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha::internal {
namespace HWY_NAMESPACE {

int64_t CompiledTarget() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace mha::internal
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "mha/error.hpp"
#include "mha/isa.hpp"
#include "src/base/cpu_features.h"
#include "src/base/isa_cap.h"
#include "src/base/onednn_errors.h"

namespace mha {
namespace internal {
namespace {

HWY_EXPORT(CompiledTarget);

// Called here, in CompiledTarget's namespace: a build of one target dispatches
// statically, to HWY_NAMESPACE::CompiledTarget as it is named at the call.
int64_t DispatchedTarget() { return HWY_DYNAMIC_DISPATCH(CompiledTarget)(); }

struct IsaName {
  Isa isa;
  const char* name;
  dnnl::cpu_isa onednn;
  int64_t highway_disabled;  // Highway orders targets best first: lower bits are wider
};

// avx512 stops short of AMX, whose tile kernels are a different machine model.
const IsaName kIsaNames[] = {
    {Isa::kSse4, "sse4", dnnl::cpu_isa::sse41, HWY_SSE4 - 1},
    {Isa::kAvx2, "avx2", dnnl::cpu_isa::avx2, HWY_AVX2 - 1},
    {Isa::kAvx512, "avx512", dnnl::cpu_isa::avx512_core_bf16, 0},
    {Isa::kNative, "native", dnnl::cpu_isa::all, 0},
};

const IsaName& Lookup(Isa isa) {
  for (const IsaName& entry : kIsaNames) {
    if (entry.isa == isa) return entry;
  }
  throw Error("isa: unknown mha::Isa value " + std::to_string(static_cast<int>(isa)));
}

std::mutex cap_mutex;
std::atomic<bool> cap_applied{false};
std::mutex kernels_mutex;
std::set<std::string> projection_kernels;

bool capped = false;  // a cap other than native was applied; guarded by cap_mutex
std::atomic<bool> amx_allowed{true};

// Whether oneDNN, which fixes its ISA at its first primitive, already runs within
// `entry` (the host may have used oneDNN before mha). Never true when lifting a cap.
bool OnednnWithin(const IsaName& entry) {
  if (entry.onednn == dnnl::cpu_isa::all) return false;
  const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  return (effective & ~static_cast<unsigned>(entry.onednn)) == 0;
}

// Requires cap_mutex.
void ApplyLocked(Isa isa, const char* source) {
  const IsaName& entry = Lookup(isa);
  // Uncapped and never capped: leave both libraries as the host (or oneDNN's own
  // ONEDNN_MAX_CPU_ISA) set them.
  if (entry.isa != Isa::kNative || capped) {
    if (dnnl::set_max_cpu_isa(entry.onednn) != dnnl::status::success &&
        !OnednnWithin(entry)) {
      throw Error(std::string(source) + ": cannot cap oneDNN at '" + entry.name +
                  "': it has already created a primitive in this process; set the cap "
                  "before the first layer, cache or attention call");
    }
    hwy::DisableTargets(entry.highway_disabled);
  }
  capped = entry.isa != Isa::kNative;
  amx_allowed.store(!capped, std::memory_order_relaxed);
  cap_applied.store(true, std::memory_order_release);
}

}  // namespace

void ApplyIsaCap() {
  if (cap_applied.load(std::memory_order_acquire)) return;
  const std::lock_guard<std::mutex> lock(cap_mutex);
  if (cap_applied.load(std::memory_order_relaxed)) return;
  const char* requested = std::getenv("MHA_MAX_ISA");
  ApplyLocked(requested && *requested ? ParseIsa(requested, "MHA_MAX_ISA") : Isa::kNative,
              "MHA_MAX_ISA");
}

dnnl::engine CpuEngine() {
  ApplyIsaCap();
  return TranslateOneDnnErrors([] { return dnnl::engine(dnnl::engine::kind::cpu, 0); });
}

bool Bf16DotProductsRun() {
  ApplyIsaCap();
  // The attention kernel's rule (src/kernel/attention_head.cc).
  const int64_t target = HWY_DYNAMIC_DISPATCH(CompiledTarget)();
  return HWY_ARCH_X86 && target <= HWY_AVX3 && CpuHasAvx512Bf16();
}

bool CapAllowsAmx() { return amx_allowed.load(std::memory_order_relaxed); }

const char* OnednnIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

const char* SimdTargetName() { return hwy::TargetName(DispatchedTarget()); }

void RecordProjectionKernel(const char* implementation) {
  const std::lock_guard<std::mutex> lock(kernels_mutex);
  projection_kernels.insert(implementation);
}

std::vector<std::string> ProjectionKernels() {
  const std::lock_guard<std::mutex> lock(kernels_mutex);
  return {projection_kernels.begin(), projection_kernels.end()};
}

}  // namespace internal

Isa ParseIsa(std::string_view name, std::string_view argument) {
  std::string accepted;
  for (const internal::IsaName& entry : internal::kIsaNames) {
    if (name == entry.name) return entry.isa;
    accepted += accepted.empty() ? entry.name : std::string(", ") + entry.name;
  }
  throw Error(std::string(argument) + ": expected one of " + accepted + ", got '" +
              std::string(name) + "'");
}

void SetMaxIsa(Isa isa) {
  const std::lock_guard<std::mutex> lock(internal::cap_mutex);
  internal::ApplyLocked(isa, "SetMaxIsa");
}

}  // namespace mha
#endif  // HWY_ONCE
