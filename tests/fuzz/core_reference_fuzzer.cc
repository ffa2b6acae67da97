// libFuzzer target: the attention core against its double-precision reference. The
// input picks the shapes, both layouts, dense and strided views, and every feature
// at once or alone (causal alignments, windows, attention chunks, soft-cap, ALiBi, sinks,
// rotary embeddings, QK-norm, all mask kinds and conventions, log-sum-exp, thread
// counts, fp32 or bf16 compute), with q, k and v each ordinary, tiny or (v) huge. The
// two must agree: both refuse the call, or both give the same outputs within fp32
// error, or bf16's (NaN exactly where the reference has NaN). The call again on the
// other thread count must give the same bits (docs/errors.md, Determinism). Any
// disagreement aborts.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "mha/mha.hpp"
#include "tests/fuzz/fuzz_input.h"

namespace {

using mha::fuzz::FuzzInput;

// A [B, H, S, D] tensor in either layout over its own buffer, dense or with a gap
// after every row.
struct Tensor {
  std::vector<float> buffer;
  mha::Shape shape;
  int64_t strides[3] = {0, 0, 0};

  // exponents: the powers of two its entries may be scaled by (the first: usually).
  Tensor(FuzzInput& input, mha::HeadLayout layout, int64_t b, int64_t h, int64_t s,
         int64_t d, const std::vector<int>& exponents = {0}) {
    const bool bhsd = layout == mha::HeadLayout::kBHSD;
    shape = bhsd ? mha::Shape{b, h, s, d} : mha::Shape{b, s, h, d};
    const int64_t gap = input.Byte() % 4 == 0 ? 1 + input.Byte() % 5 : 0;
    const int64_t row = d + gap;
    if (gap) {
      strides[2] = row;
      strides[1] = shape[2] * row;
      strides[0] = shape[1] * strides[1];
    }
    buffer.resize(b * h * s * row);
    const uint8_t magnitude = input.Byte();
    const int exponent =
        magnitude < 192 ? exponents[0] : exponents[magnitude % exponents.size()];
    for (float& v : buffer) {
      v = std::ldexp((static_cast<int>(input.Byte()) - 128) / 64.0f, exponent);
    }
  }
  double LargestEntry() const {
    double largest = 0.0;
    for (float v : buffer) largest = std::max(largest, double{std::fabs(v)});
    return largest;
  }
  mha::TensorView View() const {
    return mha::TensorView(buffer.data(), shape)
        .WithStrides(strides[0], strides[1], strides[2]);
  }
  mha::MutableTensorView Output() {
    return mha::MutableTensorView(buffer.data(), shape)
        .WithStrides(strides[0], strides[1], strides[2]);
  }
};

struct Masks {
  std::vector<float> float_mask;
  std::vector<uint8_t> bool_mask, padding;
  std::vector<int64_t> lengths;
  mha::AttentionMasks masks;

  Masks(FuzzInput& input, int64_t b, int64_t h, int64_t sq, int64_t sk) {
    const uint8_t pick = input.Byte();
    masks.is_causal = pick & 1;
    if (pick & 2) masks.causal_alignment = mha::CausalAlignment::kBottomRight;
    if (pick & 4) {
      masks.convention =
          pick & 64 ? mha::MaskConvention::kSdpa : mha::MaskConvention::kZeroMeansMasked;
    }
    if (pick & 8) {  // [B, H, Sq, Sk] float, or [Sq, Sk] bool
      if (input.Byte() % 2) {
        float_mask.resize(b * h * sq * sk);
        for (float& v : float_mask) {
          const uint8_t x = input.Byte();
          v = x < 32 ? -INFINITY : (x % 16) * 0.25f - 2.0f;
        }
        masks.attn_mask = mha::TensorView(float_mask.data(), mha::Shape{b, h, sq, sk});
      } else {
        bool_mask.resize(sq * sk);
        for (uint8_t& v : bool_mask) v = input.Byte() % 4 == 0;
        masks.attn_mask =
            mha::TensorView(bool_mask.data(), mha::DType::kBool, mha::Shape{sq, sk});
      }
    }
    if (pick & 16) {
      padding.resize(b * sk);
      for (uint8_t& v : padding) v = input.Byte() % 5 == 0;
      masks.key_padding_mask =
          mha::TensorView(padding.data(), mha::DType::kBool, mha::Shape{b, sk});
    }
    if (pick & 32) {
      for (int64_t i = 0; i < b; ++i) lengths.push_back(input.Byte() % (sk + 1));
      masks.key_lengths =
          mha::TensorView(lengths.data(), mha::DType::kInt64, mha::Shape{b});
    }
  }
};

struct Features {
  mha::CoreOptions options;
  std::vector<float> sinks, norms;
  std::optional<mha::RotaryEmbedding> rotary;

  Features(FuzzInput& input, int64_t h, int64_t d) {
    const uint8_t pick = input.Byte();
    if (pick & 1) options.features.sliding_window = input.Size(20);  // 0, < 0: refused
    if (pick & 2) options.features.sliding_window_right = input.Size(20);
    if (pick & 4) options.features.softcap = 0.5f + input.Byte() % 32;
    if (pick & 8) options.features.alibi = true;
    if (pick & 16) {
      for (int64_t i = 0; i < h; ++i) sinks.push_back((input.Byte() % 32) * 0.25f - 4.0f);
      options.sinks = mha::TensorView(sinks.data(), mha::Shape{h});
    }
    if (pick & 32) options.scale = (input.Byte() % 17) * 0.0625f;  // 0: uniform
    if ((pick & 64) && d >= 2) {
      mha::RotaryConfig config;
      config.pairing = input.Byte() % 2 ? mha::RotaryPairing::kHalfSplit
                                        : mha::RotaryPairing::kInterleaved;
      config.rotary_dim = 2 * (1 + input.Byte() % (d / 2));
      config.max_positions = 64;
      rotary.emplace(config, d);
      options.rotary = &*rotary;
    }
    if (pick & 128) options.features.attention_chunk_size = input.Size(20);  // 0: refused
    const uint8_t more = input.Byte();
    options.num_threads = 1 + more % 2;
    if (more & 4) options.compute_dtype = mha::DType::kBFloat16;
    if (more & 2) {  // QK-norm, with weights of any sign (zero included)
      for (int64_t i = 0; i < 2 * d; ++i)
        norms.push_back((input.Byte() % 32) * 0.125f - 2);
      options.features.qk_norm = mha::QkNorm{};
      options.query_norm_weight = mha::TensorView(norms.data(), mha::Shape{d});
      options.key_norm_weight = mha::TensorView(norms.data() + d, mha::Shape{d});
    }
  }
};

// slack: an absolute error allowed beside fp32's (bf16 compute's rounding).
bool Agree(float actual, float expected, double scale, double slack) {
  if (std::isnan(expected) || std::isnan(actual)) {
    return std::isnan(expected) && std::isnan(actual);
  }
  if (std::isinf(expected)) return actual == expected;
  return std::fabs(double{actual} - expected) <= 2e-4 * scale + slack;
}

void Compare(const std::vector<float>& actual, const std::vector<float>& expected,
             const char* what, double slack) {
  double scale = 1.0;
  for (float v : expected) {
    if (std::isfinite(v)) scale = std::max(scale, double{std::fabs(v)});
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    if (!Agree(actual[i], expected[i], scale, slack)) {
      std::fprintf(stderr, "%s[%zu]: %g, reference %g\n", what, i, actual[i],
                   expected[i]);
      std::abort();
    }
  }
}

// bf16 compute rounds q, k, v and the probabilities to 8 bits of mantissa: a logit
// moves by at most 2^-8 scale |q| |k| (|q| <= sqrt(d) max |q entry|, which rotation
// keeps; QK-norm: |q| <= sqrt(d) max |weight|), which
// moves an output by (e^{2 move} - 1) max |v|, and each rounding of p and v adds 2^-9
// max |v|. Returns the output's and the log-sum-exp's slack.
std::pair<double, double> Bf16Slack(const Features& f, const Tensor& q, const Tensor& k,
                                    const Tensor& v, int64_t d) {
  if (f.options.compute_dtype != mha::DType::kBFloat16) return {0.0, 0.0};
  double q_entry = q.LargestEntry(), k_entry = k.LargestEntry();
  if (f.options.features.qk_norm) {
    q_entry = k_entry = 0.0;
    for (int64_t i = 0; i < d; ++i) {
      q_entry = std::max(q_entry, double{std::fabs(f.norms[i])});
      k_entry = std::max(k_entry, double{std::fabs(f.norms[d + i])});
    }
  }
  const double q_norm = std::sqrt(double(d)) * q_entry,
               k_norm = std::sqrt(double(d)) * k_entry;
  const double scale = f.options.scale ? double{*f.options.scale} : 1.0 / std::sqrt(d);
  const double logit = std::ldexp(scale * q_norm * k_norm, -8);
  const double slack = std::expm1(std::min(2.0 * logit, 80.0)) + std::ldexp(4.0, -9);
  return {slack * v.LargestEntry(), logit + std::ldexp(1.0, -7)};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzInput input(data, size);
  const mha::HeadLayout layout =
      input.Byte() % 2 ? mha::HeadLayout::kBSHD : mha::HeadLayout::kBHSD;
  const int64_t b = 1 + input.Byte() % 2, h_kv = 1 + input.Byte() % 2;
  const int64_t h = h_kv * (1 + input.Byte() % 3);
  const int64_t sq = 1 + input.Byte() % 12, sk = 1 + input.Byte() % 40;
  const int64_t dims[] = {1, 3, 4, 8, 16, 24, 64};
  const int64_t d = dims[input.Byte() % 7];
  Masks masks(input, b, h, sq, sk);
  Features features(input, h, d);
  const Tensor query(input, layout, b, h, sq, d, {0, -40, -70}),
      key(input, layout, b, h_kv, sk, d, {0, -40, -70}),
      value(input, layout, b, h_kv, sk, d, {0, -120, 40});
  Tensor output(input, layout, b, h, sq, d);
  Tensor reference = output;  // the same view, and the same floats in its gaps
  std::vector<float> lse(b * h * sq), reference_lse(b * h * sq);
  const mha::MutableTensorView lse_view(lse.data(), mha::Shape{b, h, sq}),
      reference_lse_view(reference_lse.data(), mha::Shape{b, h, sq});
  bool refused = false, reference_refused = false;
  features.options.layout = layout;
  try {
    mha::ScaledDotProductAttention(query.View(), key.View(), value.View(), masks.masks,
                                   output.Output(), features.options, lse_view);
  } catch (const mha::Error&) {
    refused = true;
  }
  try {
    mha::NaiveScaledDotProductAttention(query.View(), key.View(), value.View(),
                                        masks.masks, reference.Output(), features.options,
                                        reference_lse_view);
  } catch (const mha::Error&) {
    reference_refused = true;
  }
  if (refused != reference_refused) {
    std::fprintf(stderr, "refused: mha %d, reference %d\n", refused, reference_refused);
    std::abort();
  }
  if (refused) return 0;
  const auto [slack, lse_slack] = Bf16Slack(features, query, key, value, d);
  Compare(output.buffer, reference.buffer, "output", slack);
  Compare(lse, reference_lse, "logsumexp", lse_slack);
  // The same call on the other thread count: the same bits.
  Tensor again = reference;  // the gaps as the output's
  std::vector<float> lse_again(lse.size());
  features.options.num_threads = 3 - features.options.num_threads;
  mha::ScaledDotProductAttention(
      query.View(), key.View(), value.View(), masks.masks, again.Output(),
      features.options, mha::MutableTensorView(lse_again.data(), mha::Shape{b, h, sq}));
  if (std::memcmp(again.buffer.data(), output.buffer.data(),
                  output.buffer.size() * sizeof(float)) != 0 ||
      std::memcmp(lse_again.data(), lse.data(), lse.size() * sizeof(float)) != 0) {
    std::fprintf(stderr, "other bits on %d threads\n", features.options.num_threads);
    std::abort();
  }
  return 0;
}
