// The writes of new key and value rows into a KV head's pages, per SIMD target, that
// each kind's append (src/kv/kinds/) is made of: the panel copy of kv_panels-inl.h
// (keys rotated on the way in for rotary layers) for float and bfloat16 pages, or a
// quantised kind's writer called token by token (AppendRows) into the same panel
// layout (src/kv/kv_pages.h): per-token scales (TokenCodes), keys per channel
// (channel_keys.h), int4 values in groups (value_groups.h).

#if defined(MHA_KERNELS_KV_APPEND_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_KV_APPEND_INL_H_
#undef MHA_KERNELS_KV_APPEND_INL_H_
#else
#define MHA_KERNELS_KV_APPEND_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <limits>

#include "hwy/highway.h"
#include "src/kv/channel_keys.h"
#include "src/kv/kv_append.h"
#include "src/kv/kv_panels-inl.h"
#include "src/kv/token_scales.h"
#include "src/simd/fp8.h"
#include "src/simd/rotary-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

inline int64_t ValueHeadDim(const PanelAppend& a) {
  return a.value_head_dim > 0 ? a.value_head_dim : a.head_dim;
}

// float or bfloat16 pages: one head split per page the new rows touch.
template <typename T>
void AppendSplit(const PanelAppend& a) {
  const hn::ScalableTag<float> d;
  const KvPages& pages = *a.pages;
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  const size_t value_head_dim = static_cast<size_t>(ValueHeadDim(a));
  const size_t padded = RoundUp(value_head_dim, kPanelWidth);
  for (int64_t done = 0; done < a.rows;) {
    const int64_t position = a.first + done, page = position / pages.page_size;
    const size_t offset = static_cast<size_t>(position % pages.page_size);
    const size_t rows = std::min<size_t>(pages.page_size - offset, a.rows - done);
    // Padding follows the last row, in its page.
    const bool last = done + static_cast<int64_t>(rows) == a.rows;
    const int64_t pad_end = std::min(pages.page_size, a.pad_to - page * pages.page_size);
    const size_t zero_end =
        last ? std::max(offset + rows, static_cast<size_t>(pad_end)) : offset + rows;
    const mha::HWY_NAMESPACE::KeyRotation rotation{
        a.rotary,
        a.key_norm,
        a.positions ? a.positions + done : nullptr,
        static_cast<int64_t>(offset),
        a.rotation_scratch,
        a.rotation_rows};
    mha::HWY_NAMESPACE::SplitRotatedKeys(d, a.keys + done * a.key_stride, a.key_stride,
                                         offset, rows, zero_end, head_dim,
                                         reinterpret_cast<T*>(pages.KeyPage(page)),
                                         static_cast<size_t>(pages.page_size), rotation);
    if (!pages.values_in_keys) {
      mha::HWY_NAMESPACE::SplitNormalizedValues(
          d, a.values + done * a.value_stride, a.value_stride, offset, rows, zero_end,
          value_head_dim, padded, reinterpret_cast<T*>(pages.ValuePage(page)),
          static_cast<size_t>(pages.page_size), a.value_norm, a.rotation_scratch,
          a.rotation_rows);
    }
    done += static_cast<int64_t>(rows);
  }
}

// How a quantised kind codes a value already divided by its scale: symmetric int8
// (q in [-127, 127]) or an fp8 format (src/simd/fp8.h, saturating).
struct Int8Code {
  using Type = int8_t;
  static constexpr float kMax = 127.0f;
  static constexpr float kWidened = 1.0f;
  static int8_t Encode(float x) {
    return static_cast<int8_t>(std::clamp(std::nearbyint(x), -kMax, kMax));
  }
};
template <class Format>
struct Fp8Code {
  using Type = Format;
  static constexpr float kMax = Format::kMax;
  static constexpr float kWidened = Format::kWidened;
  static Format Encode(float x) {
    Format code;
    code.bits = EncodeFp8<Format>(x);
    return code;
  }
};

// x ~ scale * code, scale = max|x| / Code::kMax. Writes code k to out[index(k)] and
// returns the scale (0 for an all-zero row) over Code::kWidened, what the kernel
// multiplies its widened codes by. A row with a NaN or an infinity has no
// scaled form: zeros with a NaN scale, so that every score or context it enters is
// NaN, as the float row would make it. Without `scaled` (scale-free fp8), the
// values are coded as they are and 1 is returned.
template <class Code, class Index>
float Quantize(const float* row, size_t n, bool scaled, typename Code::Type* out,
               const Index& index) {
  if (!scaled) {
    for (size_t k = 0; k < n; ++k) out[index(k)] = Code::Encode(row[k]);
    return 1.0f;
  }
  float max_abs = 0.0f;
  for (size_t k = 0; k < n; ++k) {
    if (!std::isfinite(row[k])) {
      for (size_t j = 0; j < n; ++j) out[index(j)] = Code::Encode(0.0f);
      return std::numeric_limits<float>::quiet_NaN();
    }
    max_abs = std::max(max_abs, std::fabs(row[k]));
  }
  const float scale = max_abs / Code::kMax / Code::kWidened;
  // In double: kMax / max_abs overflows a float for rows below about 1e-34, and a
  // zero entry times an infinite factor would code NaN.
  const double inverse = max_abs > 0.0f ? Code::kMax / double{max_abs} : 0.0;
  for (size_t k = 0; k < n; ++k) {
    out[index(k)] = Code::Encode(static_cast<float>(row[k] * inverse));
  }
  return scale;
}

// A token's key into its page's K^T column `offset` and its value into V row
// `offset`, codes of Code with a scale each (`scaled`) or none (scale-free).
template <class Code>
struct TokenCodes {
  bool scaled = true;

  void Key(const KvPages& pages, const float* key, int64_t page, size_t offset,
           bool /*last*/) const {
    const size_t head_dim = static_cast<size_t>(pages.head_dim);
    const float scale = Quantize<Code>(
        key, head_dim, scaled,
        reinterpret_cast<typename Code::Type*>(pages.KeyPage(page)),
        [&](size_t k) { return TileOffset<typename Code::Type>(k, offset, head_dim); });
    if (scaled) KeyTokenScales(pages, page)[offset] = scale;
  }
  void Value(const KvPages& pages, const float* value, size_t value_head_dim,
             int64_t page, size_t offset) const {
    const size_t page_size = static_cast<size_t>(pages.page_size);
    const float scale = Quantize<Code>(
        value, value_head_dim, scaled,
        reinterpret_cast<typename Code::Type*>(pages.ValuePage(page)),
        [&](size_t k) { return TileOffset<typename Code::Type>(offset, k, page_size); });
    if (scaled) ValueTokenScales(pages, page)[offset] = scale;
  }
};

// Keys per channel: the key joins the residual, and its page is requantised whole
// from there when it fills or the write ends (channel_keys.h).
inline void AppendChannelKey(const KvPages& pages, const ResidualKeys& residual_keys,
                             const float* key, int64_t page, size_t offset, bool last) {
  const size_t head_dim = static_cast<size_t>(pages.head_dim);
  std::copy_n(key, head_dim, pages.key_residual + offset * head_dim);
  if (last || offset + 1 == static_cast<size_t>(pages.page_size)) {
    residual_keys.quantize_page(pages, page, pages.key_residual,
                                static_cast<int64_t>(offset + 1), pages.head_dim);
  }
}

// Token by token: each key (rotated, normalised) and value (normalised) to the
// kind's writer, which codes it into its page: Key(pages, key, page, offset, last
// row of the write) and Value(pages, value, value_head_dim, page, offset).
template <class Writer>
void AppendRows(const PanelAppend& a, const Writer& writer) {
  const hn::ScalableTag<float> d;
  const KvPages& pages = *a.pages;
  const size_t head_dim = static_cast<size_t>(a.head_dim);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t position = a.first + r, page = position / pages.page_size;
    const size_t offset = static_cast<size_t>(position % pages.page_size);
    const float* key = a.keys + r * a.key_stride;
    if (a.rotary || a.key_norm.enabled()) {
      mha::HWY_NAMESPACE::NormRotateRow(d, key, head_dim, a.key_norm, a.rotary,
                                        a.rotary ? a.positions[r] : 0, 1.0f,
                                        a.rotation_scratch);
      key = a.rotation_scratch;
    }
    // Key `offset` is column `offset` of the page's K^T tile, row `offset` of its V.
    writer.Key(pages, key, page, offset, r + 1 == a.rows);
    if (pages.values_in_keys) continue;
    const size_t value_head_dim = static_cast<size_t>(ValueHeadDim(a));
    const float* value = a.values + r * a.value_stride;
    if (a.value_norm.enabled()) {  // the key's scratch is free again
      mha::HWY_NAMESPACE::NormRotateRow(d, value, value_head_dim, a.value_norm, nullptr,
                                        0, 1.0f, a.rotation_scratch);
      value = a.rotation_scratch;
    }
    writer.Value(pages, value, value_head_dim, page, offset);
  }
}

inline void CheckAppend(const PanelAppend& a) {
  HWY_DASSERT(a.pages && a.rows >= 0 && a.first >= 0 && a.pad_to >= a.first + a.rows);
  HWY_DASSERT(a.pages->head_dim == a.head_dim);
  HWY_DASSERT(!a.rotary || a.positions);
  HWY_DASSERT(!(a.rotary || a.key_norm.enabled() || a.value_norm.enabled()) ||
              (a.rotation_scratch && a.rotation_rows > 0));
  (void)a;
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_KV_APPEND_INL_H_
