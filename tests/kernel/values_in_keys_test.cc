// Pages whose values are elements of their keys (MLA's latent, kv_pages.h): the
// kernel makes each page's V tile from its K^T tile. Against pages that store the
// same values separately the output is bitwise equal (float and bfloat16: the same
// elements meet the same products), and against the double-precision reference it is
// within each storage's bound, for page sizes of a paged cache (16, odd last pages)
// and of a workspace (128), decoding over split key ranges (a group of more heads than
// a step takes too) and prefilling causally.
#include <gtest/gtest.h>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "mha/scaled_dot_product_attention.hpp"
#include "src/core/attention_core.h"
#include "src/core/write_kv_pages.h"
#include "src/kv/contiguous_pages.h"
#include "src/kv/tile_sizes.h"
#include "tests/test_util.h"

namespace mha::internal {
namespace {

using testing::ExpectClose;
using testing::RandomFloats;

struct LatentCase {
  std::string name;
  KvStorage storage = KvStorage::kFloat32;
  int64_t page_size = 16, heads = 8, query_len = 1, key_len = 1001;
  int64_t head_dim = 40, value_head_dim = 32;  // keys: [rope part, latent] ...
  int64_t value_offset = 0;                    // ... where the latent starts
  bool causal = false;
};

// One MQA call (one KV head) over pages of `layout`: keys written once (and values,
// unless they are in the keys).
std::vector<float> Attend(const LatentCase& c, const BlockLayout& layout,
                          const std::vector<float>& query, const std::vector<float>& key,
                          const std::vector<float>& value) {
  ContiguousPages pages;
  pages.Reset(layout, 1, c.key_len);
  KvWrite write;
  write.key = {key.data(), 0, c.head_dim, c.head_dim};
  write.value = {value.data(), 0, c.value_head_dim, c.value_head_dim};
  write.batch_end = 1;
  write.num_kv_heads = 1;
  write.head_dim = c.head_dim;
  write.value_head_dim = c.value_head_dim;
  write.count = c.key_len;
  write.zero_padding = true;
  write.pages = pages;
  std::vector<float> rotation_scratch;
  WriteKvPages(write, rotation_scratch);

  std::vector<float> context(c.heads * c.query_len * c.value_head_dim);
  AttentionParams params;
  params.num_heads = c.heads;
  params.num_kv_heads = 1;
  params.head_dim = c.head_dim;
  params.value_head_dim = c.value_head_dim;
  params.values_in_keys = layout.values_in_keys;
  params.value_offset = layout.values_in_keys ? c.value_offset : 0;
  params.query_len = params.query_count = c.query_len;
  params.key_len = c.key_len;
  params.batch_end = 1;
  params.query = {query.data(), c.heads * c.query_len * c.head_dim,
                  c.query_len * c.head_dim, c.head_dim};
  params.context = {context.data(), c.heads * c.query_len * c.value_head_dim,
                    c.query_len * c.value_head_dim, c.value_head_dim};
  params.query_scale = 0.15f;
  params.pages = pages;
  params.page_size = c.page_size;
  AttentionMasks masks;
  masks.is_causal = c.causal;
  masks.causal_alignment = CausalAlignment::kBottomRight;
  const MaskPlan plan(masks, {}, CallSizes{1, c.query_len, c.key_len}, c.heads);
  CoreWorkspace workspace;
  RunAttentionCore(params, plan, workspace);
  return context;
}

// The double-precision reference with values = the keys' elements from value_offset.
std::vector<float> Reference(const LatentCase& c, const std::vector<float>& query,
                             const std::vector<float>& key) {
  std::vector<float> out(c.heads * c.query_len * c.value_head_dim);
  AttentionMasks masks;
  masks.is_causal = c.causal;
  masks.causal_alignment = CausalAlignment::kBottomRight;
  CoreOptions options;
  options.scale = 0.15f;
  const TensorView value =
      TensorView(key.data() + c.value_offset, Shape{1, 1, c.key_len, c.value_head_dim})
          .WithStrides(c.key_len * c.head_dim, c.key_len * c.head_dim, c.head_dim);
  NaiveScaledDotProductAttention(
      TensorView(query.data(), Shape{1, c.heads, c.query_len, c.head_dim}),
      TensorView(key.data(), Shape{1, 1, c.key_len, c.head_dim}), value, masks,
      MutableTensorView(out.data(), Shape{1, c.heads, c.query_len, c.value_head_dim}),
      options);
  return out;
}

void PrintTo(const LatentCase& c, std::ostream* os) { *os << c.name; }

class ValuesInKeys : public ::testing::TestWithParam<LatentCase> {};

TEST_P(ValuesInKeys, MatchSeparateValuePagesAndTheReference) {
  const LatentCase& c = GetParam();
  const std::vector<float> query = RandomFloats(c.heads * c.query_len * c.head_dim, 1);
  const std::vector<float> key = RandomFloats(c.key_len * c.head_dim, 2);
  std::vector<float> value(c.key_len * c.value_head_dim);  // the keys' latent part
  for (int64_t j = 0; j < c.key_len; ++j) {
    for (int64_t k = 0; k < c.value_head_dim; ++k) {
      value[j * c.value_head_dim + k] = key[j * c.head_dim + c.value_offset + k];
    }
  }
  const BlockLayout latent(c.page_size, 1, c.head_dim, c.storage, c.value_head_dim,
                           /*values_in_keys=*/true);
  const BlockLayout separate(c.page_size, 1, c.head_dim, c.storage, c.value_head_dim);
  EXPECT_EQ(latent.value_page_bytes, 0);
  const std::vector<float> out = Attend(c, latent, query, key, value);
  if (c.storage != KvStorage::kInt8) {  // int8 values would have their own scales
    EXPECT_EQ(out, Attend(c, separate, query, key, value));
  }
  const double bound = c.storage == KvStorage::kFloat32 ? 1e-4 : 2e-2;
  ExpectClose(out, Reference(c, query, key), c.name.c_str(), bound);
}

std::vector<LatentCase> Cases() {
  std::vector<LatentCase> cases;
  for (const KvStorage storage :
       {KvStorage::kFloat32, KvStorage::kBFloat16, KvStorage::kInt8}) {
    const std::string type = storage == KvStorage::kFloat32    ? "f32"
                             : storage == KvStorage::kBFloat16 ? "bf16"
                                                               : "int8";
    LatentCase c;
    c.storage = storage;
    c.name = "decode_page16_odd_last_page_" + type;
    cases.push_back(c);
    c.name = "prefill_causal_page128_" + type;
    c.page_size = 128, c.query_len = 70, c.key_len = 300, c.causal = true;
    c.heads = 4, c.head_dim = 72, c.value_head_dim = 64;
    cases.push_back(c);
    c.name = "latent_after_rope_part_" + type;  // MLA's [k_pe, latent]
    c.value_offset = 16, c.head_dim = 80;
    cases.push_back(c);
    c.value_offset = 0;
    c.name = "decode_unpadded_value_dim_" + type;
    c.page_size = 16, c.query_len = 1, c.key_len = 77, c.value_head_dim = 20;
    cases.push_back(c);
    // More heads than a decode step takes (kMaxQueryStep): one step of 128, then 8.
    c.name = "decode_group_past_a_step_" + type;
    c.heads = static_cast<int64_t>(kMaxQueryStep) + 8, c.key_len = 600;
    cases.push_back(c);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Cases, ValuesInKeys, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<LatentCase>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace mha::internal
