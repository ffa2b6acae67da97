// Once a shape has been seen, Forward allocates nothing of its own. oneDNN 2.6 still
// allocates inside every primitive execution (its per-call argument map, and thread
// partitions when threaded), which no caller can avoid: every allocation made during
// a repeated forward must have a libdnnl frame on its stack.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "tests/called_from_onednn.h"

#include "tests/test_util.h"

namespace {

std::atomic<bool> g_counting{false};
std::atomic<long> g_total{0}, g_outside_onednn{0};
thread_local bool t_inside_hook = false;

void Count() {
  if (!g_counting || t_inside_hook) return;
  t_inside_hook = true;
  ++g_total;
  if (!mha::testing::CalledFromOneDnn()) ++g_outside_onednn;
  t_inside_hook = false;
}

void* Allocate(size_t size) {
  Count();
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}

}  // namespace

void* operator new(size_t size) { return Allocate(size); }
void* operator new[](size_t size) { return Allocate(size); }
void* operator new(size_t size, const std::nothrow_t&) noexcept {
  Count();
  return std::malloc(size ? size : 1);
}
void* operator new(size_t size, std::align_val_t align) {
  Count();
  const size_t alignment = static_cast<size_t>(align);
  if (void* p =
          std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace mha::testing {
namespace {

struct AllocationCase {
  const char* name;
  int64_t batch, query_len, key_len;
  bool causal, weights, chunked;
  int threads;
};
void PrintTo(const AllocationCase& c, std::ostream* os) { *os << c.name; }

class Allocations : public ::testing::TestWithParam<AllocationCase> {};

TEST_P(Allocations, RepeatedForwardAllocatesOnlyInsideOneDnn) {
  const AllocationCase& c = GetParam();
  LayerSpec spec;
  spec.num_heads = 4;
  spec.head_dim = 16;
  spec.query_dim = 64;
  const OwnedLayer layer = MakeLayer(spec, 3);
  const MultiheadAttention attention(layer.config, layer.weights);
  const std::vector<float> query = RandomFloats(c.batch * c.query_len * 64, 1);
  const std::vector<float> key = RandomFloats(c.batch * c.key_len * 64, 2);
  AttentionInputs inputs{
      TensorView(query.data(), Shape{c.batch, c.query_len, 64}), {}, {}};
  if (c.key_len != c.query_len) {
    inputs.key = inputs.value = TensorView(key.data(), Shape{c.batch, c.key_len, 64});
  }
  AttentionMasks masks;
  masks.is_causal = c.causal;
  std::vector<float> out(c.batch * c.query_len * 64),
      probs(c.batch * c.query_len * c.key_len);
  const AttentionOutputs outputs{
      MutableTensorView(out.data(), Shape{c.batch, c.query_len, 64}),
      c.weights ? MutableTensorView(probs.data(), Shape{c.batch, c.query_len, c.key_len})
                : MutableTensorView()};
  ForwardOptions options;
  options.num_threads = c.threads;
  if (c.chunked) options.workspace_budget_bytes = 64 * 1024;
  void* warm[1];
  backtrace(warm, 1);  // backtrace loads its unwinder on first use
  for (int i = 0; i < 2; ++i) attention.Forward(inputs, masks, outputs, options);

  g_total = g_outside_onednn = 0;
  g_counting = true;
  for (int i = 0; i < 5; ++i) attention.Forward(inputs, masks, outputs, options);
  g_counting = false;
  EXPECT_EQ(g_outside_onednn, 0) << c.name << ": " << g_total << " allocations in all";
  EXPECT_GT(g_total, 0) << "the counting hook saw nothing";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, Allocations,
    ::testing::Values(
        AllocationCase{"self", 2, 100, 100, false, false, false, 2},
        AllocationCase{"self_one_thread", 2, 100, 100, true, false, false, 1},
        AllocationCase{"small_rows", 1, 20, 20, false, false, false, 1},
        AllocationCase{"self_weights", 2, 100, 100, false, true, false, 2},
        AllocationCase{"cross", 2, 90, 130, false, false, false, 2},
        AllocationCase{"chunked_causal", 2, 130, 130, true, false, true, 2}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mha::testing
