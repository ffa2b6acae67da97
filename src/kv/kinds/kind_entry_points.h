// In a kind's file (src/kv/kinds/), inside #if HWY_ONCE and namespace
// mha::internal: MHA_KV_KIND_ENTRY_POINTS(Name) exports the per-target AttendName and
// AppendName it defined and makes AttendNameRun and AppendNameRun, which dispatch
// to the best target, for its KvKind row (kv_kind.h).
#pragma once

#include "hwy/highway.h"
#include "src/kernel/attention_head.h"
#include "src/kv/kv_append.h"
#include "src/kv/kv_kind.h"

#define MHA_KV_KIND_ENTRY_POINTS(Name)                                               \
  HWY_EXPORT(Attend##Name);                                                          \
  HWY_EXPORT(Append##Name);                                                          \
  static void Attend##Name##Run(const AttentionParams& params, const CoreTask& task, \
                                const KvPages& pages, const MaskPlan& masks,         \
                                const HeadScratch& layout, float* partials,          \
                                float* scratch) {                                    \
    HWY_DYNAMIC_DISPATCH(Attend##Name)                                               \
    (params, task, pages, masks, layout, partials, scratch);                         \
  }                                                                                  \
  static void Append##Name##Run(const PanelAppend& append) {                         \
    HWY_DYNAMIC_DISPATCH(Append##Name)(append);                                      \
  }

// In a kind's file, inside its per-target namespace: AttendName, the flash kernel
// over pages of the kind whose traits are Traits (kind_traits-inl.h).
#define MHA_KV_KIND_ATTEND(Name, Traits)                                          \
  void Attend##Name(const AttentionParams& params, const CoreTask& task,          \
                    const KvPages& pages, const MaskPlan& masks,                  \
                    const HeadScratch& layout, float* partials, float* scratch) { \
    AttendHeadOf<Traits>(params, task, pages, masks, layout, partials, scratch);  \
  }
