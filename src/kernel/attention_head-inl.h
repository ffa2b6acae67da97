// The flash kernel, per SIMD target, over the pages of any KV storage kind: for each
// step of queries (staged: scaled, by Llama 4's temperature too, and rotated) walk
// the key pages the masks and window leave open: scores = Q K^T, soft-cap, ALiBi,
// masks, online softmax (seeded by the sink), context += P V. Each kind's file
// (src/kv/kinds/) instantiates AttendHeadOf<its traits> once per target.

#if defined(MHA_KERNELS_ATTENTION_HEAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_ATTENTION_HEAD_INL_H_
#undef MHA_KERNELS_ATTENTION_HEAD_INL_H_
#else
#define MHA_KERNELS_ATTENTION_HEAD_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "hwy/highway.h"
#include "src/base/cpu_features.h"
#include "src/features/temperature.h"
#include "src/kernel/attention_head.h"
#include "src/kernel/bf16_tile_matmul.h"
#include "src/kernel/int8_tile_matmul.h"
#include "src/kernel/logits-inl.h"
#include "src/kernel/tile_matmul-inl.h"
#include "src/simd/bf16_convert.h"
#include "src/simd/head_norm-inl.h"
#include "src/simd/query_codes-inl.h"
#include "src/simd/softmax-inl.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace internal {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using mha::HWY_NAMESPACE::AddAlibi;
using mha::HWY_NAMESPACE::ExpAndSum;
using mha::HWY_NAMESPACE::ExpAndSumToBf16;
using mha::HWY_NAMESPACE::FiniteMaxAbsOf;
using mha::HWY_NAMESPACE::kNegInf;
using mha::HWY_NAMESPACE::MaskOutside;
using mha::HWY_NAMESPACE::NormRotateRow;
using mha::HWY_NAMESPACE::OnlineSoftmaxStep;
using mha::HWY_NAMESPACE::QuantizeQueryRow;
using mha::HWY_NAMESPACE::QuantizeWeightsOf;
using mha::HWY_NAMESPACE::RowMax;
using mha::HWY_NAMESPACE::ScaleProbabilities;
using mha::HWY_NAMESPACE::ScaleRow;
using mha::HWY_NAMESPACE::SoftCap;
using mha::HWY_NAMESPACE::StripColumns;
using mha::HWY_NAMESPACE::TileDepthPagesMatMul;
using mha::HWY_NAMESPACE::TileMatMul;
using mha::HWY_NAMESPACE::TilePagesMatMul;
using mha::HWY_NAMESPACE::WeighProbabilities;

// A kPanelWidth-square block of a tile transposed: both tiles store it as one run
// (panels of kPanelWidth columns; paired rows), its element (i, j) at
// TileOffset<T>(i, j, kPanelWidth) from the run's start. Constant offsets: the
// compiler unrolls and vectorises it (as fast as separate V pages, measured).
template <typename T>
void TransposeBlock(const T* HWY_RESTRICT block, T* HWY_RESTRICT transposed) {
  for (size_t i = 0; i < kPanelWidth; ++i) {
    for (size_t j = 0; j < kPanelWidth; ++j) {
      transposed[TileOffset<T>(j, i, kPanelWidth)] =
          block[TileOffset<T>(i, j, kPanelWidth)];
    }
  }
}

// Whether int8 key products run in integers (int8_tile_matmul.h): on AVX512_VNNI
// from an AVX-512 target, on AVX2 from the AVX2 target (or AVX-512 without VNNI).
// Unlike the bf16 paths, every path gives the same bits: exact integer sums.
inline bool Int8VnniRuns(size_t head_dim) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return Int8DotProducts(head_dim);
#else
  (void)head_dim;
  return false;
#endif
}
inline bool Int8DotProductsRun(size_t head_dim) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  return head_dim % 2 == 0;
#else
  (void)head_dim;
  return false;
#endif
}
// The integer kernel for a depth (where Int8DotProductsRun), and the panels P V gives
// it at a time (the AVX512_VNNI kernel's strip).
constexpr size_t kInt8StripPanels = 4;
// Value groups whose scales P V loads in one pass (LoadGroupScales).
constexpr size_t kScaleBatch = 4;
inline auto Int8Product(size_t depth) {
  return Int8VnniRuns(depth) ? Int8TileMatMulVnni : Int8TileMatMulAvx2;
}

// Rows [first_row, first_row + rows) of a task against every key they may see; pages
// of a KV storage kind (src/kv/kinds/), one key tile per page. The kind gives the
// tiles' loaders and its hooks on the scores, the probabilities and the context
// (src/kv/kind_traits-inl.h); the kernel names no kind. bf16_dot (a kind with
// kBf16Products): bfloat16 pages meet queries and probabilities rounded to bfloat16
// in AVX512_BF16 dot products (bf16_tile_matmul.h); a kind with kInt8KeyProducts
// (int8 keys) meets the query quantised to integers, its scores exact integer sums,
// int8_dot in integer kernels (AVX512_VNNI or AVX2: int8_tile_matmul.h), where
// head_dim keeps the codes fine (QueryCodesFor); otherwise every product is fp32 on
// pages widened as they load.
template <class Kind>
class QueryStep {
  using T = typename Kind::Code;
  // Integer products read 4-bit codes as nibbles (int8_tile_matmul.h).
  static constexpr bool kNibbles = std::is_same_v<T, Int4Pair>;

 public:
  QueryStep(const AttentionParams& params, const CoreTask& task,
            const TaskRows& task_rows, const MaskPlan& masks, const HeadScratch& layout,
            float* scratch, const KvPages& pages, int64_t first_row, size_t rows,
            bool bf16_dot, bool int8_dot)
      : params_(params),
        task_(task),
        task_rows_(task_rows),
        masks_(masks),
        layout_(layout),
        first_row_(first_row),
        rows_(rows),
        pages_(pages),
        scores_(scratch + layout.scores),
        context_(scratch + layout.context),
        query_tile_(scratch + layout.query_tile),
        maxes_(scratch + layout.row_stats),
        sums_(maxes_ + layout.rows),
        query_bits_(reinterpret_cast<uint16_t*>(scratch + layout.query_bits)),
        probability_bits_(reinterpret_cast<uint16_t*>(scratch + layout.probability_bits)),
        query_codes_(reinterpret_cast<int16_t*>(scratch + layout.query_codes)),
        probability_codes_(
            reinterpret_cast<int16_t*>(scratch + layout.probability_codes)),
        value_tile_(reinterpret_cast<T*>(scratch + layout.value_tile)),
        bf16_dot_(bf16_dot),
        int8_dot_(int8_dot),
        query_codes_run_(Kind::kInt8KeyProducts &&
                         QueryCodesFor(static_cast<size_t>(params.head_dim))),
        int8_values_(Kind::kInt8ValueProducts && !params.values_in_keys &&
                     Int8DotProductsRun(kPanelWidth)) {
    for (size_t i = 0; i < rows; ++i) {  // looked up per key tile: no division there
      positions_[i] = task_rows.Position(first_row + static_cast<int64_t>(i));
      heads_[i] = task_rows.Head(first_row + static_cast<int64_t>(i));
    }
  }

  template <class D>
  void Run(D d) {
    Start(task_.sink);
    const QueryRows query = StageQueries(d);
    // Key ranges grow with the query, so the first row starts and the last row ends
    // the keys the step can see; pages before and after are never read (a paged
    // cache may have freed those before a window).
    const int64_t key_limit = KeyEnd(rows_ - 1);
    const int64_t key_start = KeyBegin(0) / pages_.page_size * pages_.page_size;
    for (int64_t first_key = key_start, next; first_key < key_limit; first_key = next) {
      next = NextKeyStep(first_key);
      if (has_extras_) PrefetchExtras(next, key_limit);
      KeyStep(d, query, first_key, std::min(next, key_limit) - first_key,
              next < key_limit ? KeyTile(next / pages_.page_size) : nullptr);
      if (next < key_limit && task_.split_keys > 0 && next % task_.split_keys == 0) {
        Finish(d);  // a cut: this split's partial results, then the next split's
        split_offset_ += SplitFloats(task_, params_.ValueHeadDim());
        Start(/*sink=*/false);
      }
    }
    Finish(d);
    if (task_rows_.Probabilities(0)) WriteProbabilities(d, query, key_start, key_limit);
  }

 private:
  // A split's softmax state, from nothing or from the sink (a logit with no value).
  void Start(bool sink) {
    std::fill(context_, context_ + rows_ * layout_.padded_value_head_dim, 0.0f);
    for (size_t i = 0; i < rows_; ++i) {
      const bool has_sink = params_.sinks && sink;
      maxes_[i] = has_sink ? params_.sinks[Head(i)] : kNegInf;
      sums_[i] = has_sink ? 1.0f : 0.0f;
    }
  }

  // Softmax steps end at multiples of key_step, wherever a window makes the first
  // one start: every page size then groups the keys alike (a KvCache's 128-token
  // pages and a paged cache's 16-token blocks give the same bits). A task's split
  // ends one too, as if the next split were a task of its own.
  int64_t NextKeyStep(int64_t first_key) const {
    const int64_t step = static_cast<int64_t>(layout_.key_step);
    const int64_t next = (first_key / step + 1) * step;
    if (task_.split_keys == 0) return next;
    return std::min(next, (first_key / task_.split_keys + 1) * task_.split_keys);
  }

  // Position in the sequence of the step's row i, as the masks see it.
  int64_t Absolute(size_t i) const { return positions_[i]; }
  // Row i's key range: the masks' and the task's split.
  int64_t KeyBegin(size_t i) const {
    return std::max(task_.key_begin, masks_.KeyBegin(task_.batch, Absolute(i)));
  }
  int64_t KeyEnd(size_t i) const {
    return std::min(task_.key_end, masks_.KeyEnd(task_.batch, Absolute(i)));
  }
  int64_t Head(size_t i) const { return heads_[i]; }
  int64_t KernelRow(size_t i) const { return first_row_ + static_cast<int64_t>(i); }

  // The step's query rows: scaled and rotated into the query tile when asked, or
  // gathered there when they are not evenly spaced (several heads at several
  // positions); otherwise read in place.
  struct QueryRows {
    const float* data;
    size_t stride;
  };
  template <class D>
  QueryRows StageQueries(D d) {
    const int64_t stride = task_rows_.QueryStride();
    QueryRows query{task_rows_.Query(first_row_), static_cast<size_t>(stride)};
    const size_t head_dim = static_cast<size_t>(params_.head_dim);
    const bool temperature = params_.temperature_floor_scale > 0.0f;
    if (params_.query_scale != 1.0f || params_.rotary || stride == 0 || temperature ||
        params_.query_norm.enabled() || Kind::kInt8KeyProducts) {
      const int64_t* positions = task_rows_.query_positions();
      for (size_t i = 0; i < rows_; ++i) {
        NormRotateRow(d, task_rows_.Query(KernelRow(i)), head_dim, params_.query_norm,
                      params_.rotary, params_.rotary ? positions[Absolute(i)] : 0,
                      QueryScale(i), query_tile_ + i * layout_.padded_head_dim);
      }
      query = {query_tile_, layout_.padded_head_dim};
    }
    if constexpr (Kind::kInt8KeyProducts) {  // the codes, as floats, in place
      for (size_t i = 0; query_codes_run_ && i < rows_; ++i) {
        float* row = query_tile_ + i * query.stride;
        query_scales_[i] =
            QuantizeQueryRow(d, row, head_dim, QueryCodeLimit(head_dim), row,
                             query_codes_ + i * layout_.padded_head_dim);
      }
    }
    if (bf16_dot_) {  // rows rounded, zero-padded: an odd head_dim ends a pair with 0
      for (size_t i = 0; i < rows_; ++i) {
        uint16_t* row = query_bits_ + i * layout_.padded_head_dim;
        FloatToBf16(query.data + i * query.stride, head_dim, row);
        std::fill(row + head_dim, row + layout_.padded_head_dim, uint16_t{0});
      }
    }
    return query;
  }

  // Row i's query scale: the softmax's, times Llama 4's temperature at its position.
  float QueryScale(size_t i) const {
    if (params_.temperature_floor_scale <= 0.0f) return params_.query_scale;
    return params_.query_scale *
           QueryTemperature(params_.temperature_floor_scale,
                            params_.temperature_attn_scale,
                            masks_.QueryPosition(task_.batch, Absolute(i)));
  }

  // Page `page`'s K^T and V tiles, as the kernel's element type. With values in
  // keys, ValueTile is only where to prefetch (the K^T tile): Values makes the tile.
  const T* KeyTile(int64_t page) const {
    return reinterpret_cast<const T*>(pages_.KeyPage(page));
  }
  const T* ValueTile(int64_t page) const {
    return reinterpret_cast<const T*>(pages_.ValuePage(page));
  }

  // The V tile P V reads for the page's first `depth` keys: its own, or (values in
  // keys: MLA's latent) the transpose of value_head_dim rows of its K^T tile,
  // in a V page's layout. Logits has just read that K^T tile: it is in cache, so
  // the latent crosses the memory bus once.
  // Rows past `depth` are never read, but for a pair's second (zeroed: in bfloat16,
  // 0 * a NaN left in memory is NaN).
  const T* Values(int64_t page, size_t depth) {
    if (!params_.values_in_keys) return ValueTile(page);
    const T* keys = KeyTile(page);
    const size_t head_dim = static_cast<size_t>(params_.head_dim);
    const size_t offset = static_cast<size_t>(params_.value_offset);
    const size_t value_head_dim = static_cast<size_t>(params_.ValueHeadDim());
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const size_t tokens = RoundUp(depth, kPanelWidth),
                 whole = value_head_dim / kPanelWidth;
    for (size_t c = 0; c < whole * kPanelWidth; c += kPanelWidth) {
      for (size_t t = 0; t < tokens; t += kPanelWidth) {
        TransposeBlock(keys + TileOffset<T>(offset + c, t, head_dim),
                       value_tile_ + TileOffset<T>(t, c, page_size));
      }
    }
    for (size_t c = whole * kPanelWidth; c < layout_.padded_value_head_dim; ++c) {
      for (size_t t = 0; t < tokens; ++t) {  // a last partial panel, zero-padded
        value_tile_[TileOffset<T>(t, c, page_size)] =
            c < value_head_dim ? keys[TileOffset<T>(offset + c, t, head_dim)] : T();
      }
    }
    if (PairsRows<T>() && depth % 2 == 1) {
      for (size_t c = 0; c < layout_.padded_value_head_dim; ++c) {
        value_tile_[TileOffset<T>(depth, c, page_size)] = T();
      }
    }
    return value_tile_;
  }
  static const uint16_t* Bits(const T* tile) {
    return reinterpret_cast<const uint16_t*>(tile);
  }

  // Calls visit(page, column, keys) for each page of the key tile that starts at
  // first_key (a page boundary): the page's first column in the score tile and its
  // keys, padded; `padded` is the tile's.
  template <class Visit>
  void ForEachPage(int64_t first_key, size_t padded, const Visit& visit) const {
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const int64_t first_page = first_key / pages_.page_size;
    for (size_t column = 0; column < padded; column += page_size) {
      visit(first_page + static_cast<int64_t>(column / page_size), column,
            std::min(page_size, padded - column));
    }
  }

  // The final logits of keys [first_key, first_key + count) (one key tile) into the
  // scores, rows padded to `padded` with -inf.
  template <class D>
  void Logits(D d, const QueryRows& query, int64_t first_key, int64_t count,
              size_t padded) {
    const size_t stride = layout_.key_step;
    const size_t head_dim = static_cast<size_t>(params_.head_dim);
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    if (int8_dot_) {
      Int8Scores(first_key, padded);
    } else if (!bf16_dot_ && page_size < StripColumns(d) &&
               StripColumns(d) % page_size == 0) {
      PagedScores(d, query, first_key, padded);
    } else {
      ForEachPage(first_key, padded, [&](int64_t page, size_t column, size_t keys) {
        // Read next: the tile's next K page, or after its last, its first V page.
        const T* after = column + keys < padded ? KeyTile(page + 1)
                                                : ValueTile(first_key / pages_.page_size);
        const T* ahead = KeyTileAhead(first_key, column);
        if (bf16_dot_) {
          Bf16TileMatMul(rows_, keys, head_dim, query_bits_, layout_.padded_head_dim,
                         Bits(KeyTile(page)), head_dim, scores_ + column, stride,
                         /*accumulate=*/false, Bits(after), AmxDepthFor(head_dim),
                         Bits(ahead));
        } else {
          TileMatMul(d, key_loader_, rows_, keys, head_dim, query.data, query.stride,
                     KeyTile(page), head_dim, scores_ + column, stride,
                     /*accumulate=*/false, after, ahead);
        }
      });
    }
    // The integer sums (as floats) times their query scale, as Int8Scores does.
    if constexpr (Kind::kInt8KeyProducts) {
      if (query_codes_run_ && !int8_dot_) {
        for (size_t i = 0; i < rows_; ++i)
          ScaleRow(d, scores_ + i * stride, padded, query_scales_[i]);
      }
    }
    // What the kind adds to the products: its scales per token, its zero points.
    if constexpr (Kind::kScoreTerms) {
      ForEachPage(first_key, padded, [&](int64_t page, size_t column, size_t keys) {
        Kind::FinishScores(d, pages_, page, query.data, query.stride, rows_,
                           scores_ + column, stride, keys);
      });
    }
    for (size_t i = 0; i < rows_; ++i) {
      LogitRow(d, i, first_key, count, padded, scores_ + i * stride);
    }
  }

  // Pages with scales or zero points after their codes: those of the key tile at
  // first_key (below key_limit) on their way to L2, a tile ahead. The tile product
  // prefetches the codes; the scales after them (int4's per channel and per value
  // group: a page's K and V lines in 2 of 5) missed on every page.
  void PrefetchExtras(int64_t first_key, int64_t key_limit) const {
    const int64_t end =
        std::min(key_limit, first_key + static_cast<int64_t>(layout_.key_step));
    for (int64_t key = first_key; key < end; key += pages_.page_size) {
      const int64_t page = key / pages_.page_size;
      PrefetchLines(pages_.KeyPage(page) + pages_.key_codes_bytes,
                    static_cast<size_t>(pages_.key_page_bytes - pages_.key_codes_bytes));
      PrefetchLines(
          pages_.ValuePage(page) + pages_.value_codes_bytes,
          static_cast<size_t>(pages_.value_page_bytes - pages_.value_codes_bytes));
    }
  }

  // Q K^T of a key tile in integer dot products, times the query scales:
  // every K^T panel of its pages in one product. Each panel sends on to L2 the
  // matching panel of the next key tile, or after the last, a V page of this one: a
  // whole tile ahead: a paged cache's pages are scattered, beyond the prefetchers.
  // Keys with group scales (a kind's kKeyScaleGroup) are read a group of channels per
  // chunk, each chunk with its keys' scales.
  void Int8Scores(int64_t first_key, size_t padded) {
    const size_t head_dim = static_cast<size_t>(params_.head_dim);
    const int64_t next_key = NextKeyStep(first_key), key_limit = KeyEnd(rows_ - 1);
    constexpr size_t kGroup = Kind::kKeyScaleGroup;
    const size_t chunk_depth = kGroup > 0 ? kGroup : head_dim;
    const size_t chunk_count = (head_dim + chunk_depth - 1) / chunk_depth;
    constexpr size_t kMaxChunks =
        kMaxKeyStep / kPanelWidth *
        (kGroup > 0 ? (kMaxQueryCodesHeadDim + kGroup - 1) / kGroup : 1);
    HWY_DASSERT(padded / kPanelWidth * chunk_count <= kMaxChunks);
    const int8_t* chunks[kMaxChunks];
    const int8_t* aheads[kMaxChunks];
    const uint16_t* scales[kMaxChunks];
    for (size_t p = 0; p < padded / kPanelWidth; ++p) {
      const int64_t key = first_key + static_cast<int64_t>(p * kPanelWidth);
      const int64_t later = next_key + static_cast<int64_t>(p * kPanelWidth);
      const int64_t page = key / pages_.page_size;
      const size_t column = static_cast<size_t>(key % pages_.page_size);
      // A V page is about as many bytes as its K^T panels: panel j sends the j-th.
      const int8_t* ahead =
          later < key_limit ? KeyPanel(later)
                            : reinterpret_cast<const int8_t*>(
                                  ValueTile(page) + TileOffset<T>(0, column, head_dim));
      const int8_t* panel = KeyPanel(key);
      for (size_t q = 0; q < chunk_count; ++q) {
        const size_t offset = TileOffset<T>(q * chunk_depth, 0, head_dim);
        chunks[p * chunk_count + q] = panel + offset;
        aheads[p * chunk_count + q] = ahead + offset;
        if constexpr (kGroup > 0) {
          scales[p * chunk_count + q] = Kind::KeyGroupScales(pages_, page) +
                                        q * static_cast<size_t>(pages_.page_size) +
                                        column;
        }
      }
    }
    Int8Product(head_dim)(rows_, padded / kPanelWidth, head_dim, query_codes_,
                          layout_.padded_head_dim, query_scales_,
                          {chunks, aheads, chunk_depth, chunk_count,
                           kGroup > 0 ? scales : nullptr, kNibbles, Kind::kZeroCode},
                          scores_, layout_.key_step, /*accumulate=*/false);
  }
  // The K^T panel of an integer page that holds `key` (a multiple of kPanelWidth).
  const int8_t* KeyPanel(int64_t key) const {
    const size_t column = static_cast<size_t>(key % pages_.page_size);
    return reinterpret_cast<const int8_t*>(
        KeyTile(key / pages_.page_size) +
        TileOffset<T>(0, column, static_cast<size_t>(params_.head_dim)));
  }

  // The page the next key tile reads in place of the page at `column` of the tile at
  // first_key, or -1: none (past that tile or the rows' keys, which a window may have
  // freed). The products prefetch it as they read: a paged cache's pages are
  // scattered, beyond the hardware prefetchers, and a tile is time enough for memory.
  int64_t PageAhead(int64_t first_key, size_t column) const {
    const int64_t next_key = NextKeyStep(first_key);
    const int64_t later = next_key + static_cast<int64_t>(column);
    const int64_t end = std::min(NextKeyStep(next_key), KeyEnd(rows_ - 1));
    return later < end ? later / pages_.page_size : -1;
  }
  const T* KeyTileAhead(int64_t first_key, size_t column) const {
    const int64_t page = PageAhead(first_key, column);
    return page >= 0 ? KeyTile(page) : nullptr;
  }
  const T* ValueTileAhead(int64_t first_key, size_t column) const {
    const int64_t page = PageAhead(first_key, column);
    return page >= 0 ? ValueTile(page) : nullptr;
  }

  // Q K^T of a key tile of pages narrower than a strip (16-token pages on AVX-512):
  // several pages per strip (TilePagesMatMul). Each page prefetches the page a tile
  // ahead in its place, or in the last tile, the one a strip later, and the tile's
  // last pages its first V pages.
  template <class D>
  void PagedScores(D d, const QueryRows& query, int64_t first_key, size_t padded) {
    const size_t stride = layout_.key_step;
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const size_t count = (padded + page_size - 1) / page_size;
    const size_t group = StripColumns(d) / page_size;
    const int64_t first_page = first_key / pages_.page_size;
    const T* tiles[kKeyStep / kPanelWidth];
    const T* afters[kKeyStep / kPanelWidth];
    const T* aheads[kKeyStep / kPanelWidth];
    for (size_t i = 0; i < count; ++i) {
      tiles[i] = KeyTile(first_page + static_cast<int64_t>(i));
      afters[i] = i + group < count
                      ? KeyTile(first_page + static_cast<int64_t>(i + group))
                  : i + group - count < count
                      ? ValueTile(first_page + static_cast<int64_t>(i + group - count))
                      : nullptr;
      aheads[i] = KeyTileAhead(first_key, i * page_size);
    }
    TilePagesMatMul(d, key_loader_, rows_, padded, static_cast<size_t>(params_.head_dim),
                    query.data, query.stride, tiles, afters, page_size,
                    static_cast<size_t>(params_.head_dim), scores_, stride,
                    /*accumulate=*/false, aheads);
  }

  // next_keys: the next key tile's first K page, or null after the last tile.
  template <class D>
  void KeyStep(D d, const QueryRows& query, int64_t first_key, int64_t count,
               const T* next_keys) {
    const size_t padded = RoundUp(static_cast<size_t>(count), kPanelWidth);
    const size_t dim = layout_.padded_value_head_dim, stride = layout_.key_step;
    Logits(d, query, first_key, count, padded);
    float step_maxes[kMaxQueryStep];
    for (size_t i = 0; i < rows_; ++i)
      step_maxes[i] = RowMax(d, scores_ + i * stride, padded);
    for (size_t i = 0; i < rows_; ++i) {
      float* row = scores_ + i * stride;
      const bool has_context = sums_[i] > 0.0f;
      const float rescale =
          OnlineSoftmaxStep(d, row, padded, step_maxes[i], maxes_[i], sums_[i],
                            bf16_dot_ ? probability_bits_ + i * stride : nullptr);
      if (has_context && rescale != 1.0f) ScaleRow(d, context_ + i * dim, dim, rescale);
    }
    if constexpr (Kind::kProbabilityTerms) {
      ForEachPage(first_key, padded, [&](int64_t page, size_t column, size_t keys) {
        Kind::ScaleProbabilities(d, pages_, page, rows_, scores_ + column, stride, keys);
      });
    }
    ValueProducts(d, first_key, count, padded, next_keys);
    // What the kind adds apart over the whole tile (int4: the value groups' minimums).
    if constexpr (Kind::kContextTerms) {
      Kind::FinishContext(d, pages_, first_key / pages_.page_size, rows_, scores_, stride,
                          padded, context_, dim);
    }
  }

  // context += P V of the key tile at first_key, on the kind's product path.
  template <class D>
  void ValueProducts(D d, int64_t first_key, int64_t count, size_t padded,
                     const T* next_keys) {
    const size_t dim = layout_.padded_value_head_dim, stride = layout_.key_step;
    if constexpr (Kind::kInt8ValueProducts) {
      if (int8_values_)
        return Int8Context(d, first_key, static_cast<size_t>(count), padded);
    }
    if constexpr (Kind::kValueScaleGroup > 0) {
      return GroupContext(d, first_key, static_cast<size_t>(count));
    }
    if (!bf16_dot_ && !params_.values_in_keys) {
      return PagedContext(d, first_key, static_cast<size_t>(count), padded, next_keys);
    }
    ForEachPage(first_key, padded, [&](int64_t page, size_t column, size_t keys) {
      const T* after = column + keys < padded ? ValueTile(page + 1) : next_keys;
      const size_t page_size = static_cast<size_t>(pages_.page_size);
      // The padding keys after the tile's last have probability 0: P V stops there
      // (a small call's 6 keys in a 16-key tile: 6 rows of V, not 16). bf16 products
      // run to the page's padded end: AMX groups a row's products by depth, and the
      // tile's key count depends on the step's last row (causal).
      const size_t depth =
          bf16_dot_ ? keys : std::min(keys, static_cast<size_t>(count) - column);
      const T* values = Values(page, depth);
      // Values in keys are made from the K^T tile Q K^T read: nothing of their own.
      const T* ahead =
          params_.values_in_keys ? nullptr : ValueTileAhead(first_key, column);
      if (bf16_dot_) {
        Bf16TileMatMul(rows_, dim, depth, probability_bits_ + column, stride,
                       Bits(values), page_size, context_, dim,
                       /*accumulate=*/true, Bits(after), kAmxDepth, Bits(ahead));
      } else {
        // Values in keys only (the per-page path of fp32 products): a V tile made
        // from K^T codes, scaled, if at all, per token (the probabilities were).
        TileMatMul(d, rows_, dim, depth, scores_ + column, stride, values, page_size,
                   context_, dim, /*accumulate=*/true, after);
      }
    });
  }

  // context += P V over a key tile's V pages in one product: its accumulators stay
  // in registers from page to page (TileDepthPagesMatMul). The padding keys after
  // the tile's last (probability 0) are not read.
  template <class D>
  void PagedContext(D d, int64_t first_key, size_t count, size_t padded,
                    const T* next_keys) {
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const size_t dim = layout_.padded_value_head_dim, stride = layout_.key_step;
    const T* tiles[kKeyStep / kPanelWidth] = {};
    const T* aheads[kKeyStep / kPanelWidth] = {};
    ForEachPage(first_key, padded, [&](int64_t page, size_t column, size_t) {
      tiles[column / page_size] = ValueTile(page);
      aheads[column / page_size] = ValueTileAhead(first_key, column);
    });
    TileDepthPagesMatMul(d, value_loader_, rows_, dim, count, scores_, stride, tiles,
                         page_size, context_, dim, /*accumulate=*/true, next_keys,
                         aheads);
  }

  // context += P V in fp32 for values with group scales (a kind's kValueScaleGroup)
  // where the integer kernels do not run: a group of channels at a time, each row's
  // weights for the group (its probabilities times the group's scales, LoadGroupScales:
  // a weight of 0 stays 0, so a NaN group reaches only the rows that attend its token)
  // against the group's panels of the V pages' codes (the kind's value loader reads
  // codes alone), a micro-tile of rows per product so that each code is widened once
  // per kTileRows rows.
  template <class D>
  void GroupContext(D d, int64_t first_key, size_t count) {
    constexpr size_t kGroup = Kind::kValueScaleGroup;
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const size_t dim = layout_.padded_value_head_dim;
    const ValuePages tile = GatherValuePages(first_key, count);
    const T* group_tiles[ValuePages::kMax];
    HWY_ALIGN float weights[kTileRows * kMaxKeyStep];
    HWY_ALIGN float scales[kScaleBatch * kMaxKeyStep];
    for (size_t first = 0; first < dim; first += kGroup) {
      const float* group_scales = LoadGroupScales(
          d, tile, first / kGroup, (dim + kGroup - 1) / kGroup, count, scales);
      const size_t offset = TileOffset<T>(0, first, page_size);
      for (size_t q = 0; q < tile.count; ++q) group_tiles[q] = tile.tiles[q] + offset;
      for (size_t top = 0; top < rows_; top += kTileRows) {
        const size_t rows = std::min(kTileRows, rows_ - top);
        for (size_t i = 0; i < rows; ++i) {
          ScaleProbabilities(d, scores_ + (top + i) * layout_.key_step, group_scales,
                             count, weights + i * kMaxKeyStep);
        }
        TileDepthPagesMatMul(d, value_loader_, rows, std::min(kGroup, dim - first), count,
                             weights, kMaxKeyStep, group_tiles, page_size,
                             context_ + top * dim + first, dim, /*accumulate=*/true,
                             static_cast<const T*>(nullptr));
      }
    }
  }

  // context += P V over a key tile's integer V pages: each row's weights
  // (probability x value scale) quantised to codes within kProbabilityCodeLimit, then
  // one product per strip of kInt8StripPanels panels over every page, the padding
  // keys past `count` (codes 0) read to a whole pair. Values with group scales (a
  // kind's kValueScaleGroup) are weighed and quantised per group of channels, whose
  // panels are the strip. Each page's panels send on to L2 the page a key tile ahead in
  // its place.
  template <class D>
  void Int8Context(D d, int64_t first_key, size_t count, size_t padded) {
    const size_t panels = layout_.padded_value_head_dim / kPanelWidth;
    const ValuePages tile = GatherValuePages(first_key, padded);
    constexpr size_t kGroup = Kind::kValueScaleGroup;
    if constexpr (kGroup == 0) {
      QuantizeWeightRows(d, padded, padded, [&](const float* row) {
        return [=](size_t k) { return hn::LoadU(d, row + k); };
      });
      for (size_t first = 0; first < panels; first += kInt8StripPanels)
        ContextStrip(tile, first, std::min(kInt8StripPanels, panels - first), count);
    } else {
      static_assert(kGroup % kPanelWidth == 0 &&
                    kGroup / kPanelWidth <= kInt8StripPanels);
      constexpr size_t kGroupPanels = kGroup / kPanelWidth;
      HWY_ALIGN float scales[kScaleBatch * kMaxKeyStep];
      for (size_t first = 0; first < panels; first += kGroupPanels) {
        const float* group_scales =
            LoadGroupScales(d, tile, first / kGroupPanels,
                            (panels + kGroupPanels - 1) / kGroupPanels, count, scales);
        QuantizeGroupWeights(d, group_scales, count, padded);
        ContextStrip(tile, first, std::min(kGroupPanels, panels - first), count);
      }
    }
  }
  // A key tile's V pages: their numbers, tiles and the pages a tile ahead (or null).
  struct ValuePages {
    static constexpr size_t kMax = kMaxKeyStep / kPanelWidth;
    int64_t pages[kMax];
    const T* tiles[kMax];
    const T* aheads[kMax];
    size_t count;
  };
  // The V pages of the key tile at first_key that hold its first `keys` keys.
  ValuePages GatherValuePages(int64_t first_key, size_t keys) const {
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    ValuePages tile;
    tile.count = (keys + page_size - 1) / page_size;
    ForEachPage(first_key, keys, [&](int64_t page, size_t column, size_t) {
      tile.pages[column / page_size] = page;
      tile.tiles[column / page_size] = ValueTile(page);
      tile.aheads[column / page_size] = ValueTileAhead(first_key, column);
    });
    return tile;
  }
  // context's panels [first, first + panels) += the weights' codes times those panels
  // of the V pages, in one integer product.
  void ContextStrip(const ValuePages& tile, size_t first, size_t panels, size_t count) {
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    const int8_t* chunks[kInt8StripPanels * ValuePages::kMax];
    const int8_t* aheads[kInt8StripPanels * ValuePages::kMax];
    for (size_t p = 0; p < panels; ++p) {
      const size_t offset = TileOffset<T>(0, (first + p) * kPanelWidth, page_size);
      for (size_t q = 0; q < tile.count; ++q) {
        chunks[p * tile.count + q] =
            reinterpret_cast<const int8_t*>(tile.tiles[q] + offset);
        aheads[p * tile.count + q] =
            tile.aheads[q] ? reinterpret_cast<const int8_t*>(tile.aheads[q] + offset)
                           : nullptr;
      }
    }
    Int8Product(kPanelWidth)(
        rows_, panels, RoundUp(count, 2), probability_codes_, layout_.key_step,
        probability_scales_,
        {chunks, aheads, page_size, tile.count, nullptr, kNibbles, Kind::kZeroCode},
        context_ + first * kPanelWidth, layout_.padded_value_head_dim,
        /*accumulate=*/true);
  }
  // The value scales of group `group` (of `groups`) of a key tile's first `count`
  // keys, from `scales`, which holds a batch of kScaleBatch groups kMaxKeyStep floats
  // apart: the batch's first group loads the whole batch (below `groups`) in one pass,
  // so their lines miss together, not one group's at a time between products (a stall
  // on every group's first row: 17% of q8_0's kernel samples).
  template <class D>
  const float* LoadGroupScales(D d, const ValuePages& tile, size_t group, size_t groups,
                               size_t count, float* scales) const {
    const float* group_scales = scales + group % kScaleBatch * kMaxKeyStep;
    if (group % kScaleBatch != 0) return group_scales;
    const size_t page_size = static_cast<size_t>(pages_.page_size);
    for (size_t b = 0; b < kScaleBatch && group + b < groups; ++b) {
      for (size_t q = 0, column = 0; column < count; ++q, column += page_size) {
        Kind::GroupScales(d, pages_, tile.pages[q], group + b,
                          std::min(page_size, count - column),
                          scales + b * kMaxKeyStep + column);
      }
    }
    return group_scales;
  }
  // Each row's weights for a group of the values' channels: its probabilities times
  // their tokens' scales for the group (`scales`: LoadGroupScales, to a whole vector
  // past `count`), a weight of 0 staying 0, quantised as they are made; codes 0 past
  // the vector holding the last key (padding keys are never read, whatever scale
  // their page holds).
  template <class D>
  void QuantizeGroupWeights(D d, const float* scales, size_t count, size_t padded) {
    QuantizeWeightRows(d, RoundUp(count, hn::Lanes(d)), padded, [&](const float* row) {
      return [=](size_t k) {
        return WeighProbabilities(d, hn::LoadU(d, row + k), hn::LoadU(d, scales + k));
      };
    });
  }
  // Each row's weights (weights(row) loads them from its scores, QuantizeWeightsOf)
  // to codes, whole vectors to `count`, 0 to `padded`: every row's max first, so that
  // the rows' reductions and divisions overlap.
  template <class D, class Weights>
  void QuantizeWeightRows(D d, size_t count, size_t padded, const Weights& weights) {
    float maxes[kMaxQueryStep];
    for (size_t i = 0; i < rows_; ++i) {
      maxes[i] =
          FiniteMaxAbsOf(d, count, weights(scores_ + i * layout_.key_step), nullptr);
    }
    for (size_t i = 0; i < rows_; ++i) {
      int16_t* codes = probability_codes_ + i * layout_.key_step;
      probability_scales_[i] =
          QuantizeWeightsOf(d, count, weights(scores_ + i * layout_.key_step), nullptr,
                            kProbabilityCodeLimit, maxes[i], codes);
      std::fill(codes + count, codes + padded, int16_t{0});
    }
  }

  // Scores of row i to final logits: soft-cap, ALiBi, tensor masks, key range.
  template <class D>
  void LogitRow(D d, size_t i, int64_t first_key, int64_t count, size_t padded,
                float* row) const {
    const int64_t query = Absolute(i), head = Head(i);
    const int64_t begin = std::clamp<int64_t>(KeyBegin(i) - first_key, 0, count);
    const int64_t end = std::clamp<int64_t>(KeyEnd(i) - first_key, begin, count);
    if (params_.softcap > 0.0f) SoftCap(d, row, padded, params_.softcap);
    if (params_.alibi_slopes) {
      AddAlibi(d, row, padded, params_.alibi_slopes[head],
               first_key - masks_.QueryPosition(task_.batch, query));
    }
    if (masks_.has_tensor_masks()) {
      masks_.AddTensorMasks(task_.batch, head, query, first_key + begin, end - begin,
                            row + begin);
    }
    MaskOutside(d, row, static_cast<size_t>(begin), static_cast<size_t>(end), padded);
  }

  // Normalises and writes the context rows (the head merge) and the log-sum-exp.
  template <class D>
  void Finish(D d) {
    const size_t dim = static_cast<size_t>(params_.ValueHeadDim()), lanes = hn::Lanes(d);
    for (size_t i = 0; i < rows_; ++i) {
      const float sum = sums_[i];
      // Fully masked rows (sum exactly 0): zeros. A NaN sum (a non-finite input the
      // row attends to) stays NaN, never zeros that would hide it.
      const float inverse = sum == 0.0f ? 0.0f : 1.0f / sum;
      float* out = task_rows_.Context(KernelRow(i)) + split_offset_;
      const float* acc = context_ + i * layout_.padded_value_head_dim;
      size_t k = 0;
      for (; k + lanes <= dim; k += lanes) {
        hn::StoreU(hn::Mul(hn::LoadU(d, acc + k), hn::Set(d, inverse)), d, out + k);
      }
      for (; k < dim; ++k) out[k] = acc[k] * inverse;
      if (float* logsumexp = task_rows_.LogSumExp(KernelRow(i)))
        logsumexp[split_offset_] = LogSumExp(i);
    }
  }

  float LogSumExp(size_t i) const {
    return sums_[i] == 0.0f ? kNegInf : maxes_[i] + std::log(sums_[i]);
  }

  // A second pass over the keys: p = exp(logit - max) / sum from the logits computed
  // again and the row's final max and sum, so that asking for the weights leaves the
  // context exactly as computed without them. (Not exp(logit - log-sum-exp): with
  // logits near -3.4e38, log(sum) vanishes in the log-sum-exp.)
  template <class D>
  void WriteProbabilities(D d, const QueryRows& query, int64_t key_start,
                          int64_t key_limit) {
    for (size_t i = 0; i < rows_; ++i) {
      float* probs = Probabilities(i);
      std::fill(probs, probs + params_.key_len, std::isnan(sums_[i]) ? sums_[i] : 0.0f);
    }
    for (int64_t first_key = key_start; first_key < key_limit;
         first_key = NextKeyStep(first_key)) {
      const int64_t count = std::min(NextKeyStep(first_key), key_limit) - first_key;
      const size_t padded = RoundUp(static_cast<size_t>(count), kPanelWidth);
      Logits(d, query, first_key, count, padded);
      for (size_t i = 0; i < rows_; ++i) {
        if (sums_[i] == 0.0f || std::isnan(sums_[i])) continue;  // zeros, or NaN
        float* row = scores_ + i * layout_.key_step;
        if (bf16_dot_) {  // the rounded weights the context was computed with
          uint16_t* bits = probability_bits_ + i * layout_.key_step;
          ExpAndSumToBf16(d, row, padded, maxes_[i], bits);
          Bf16ToFloat(bits, padded, row);
        } else {
          ExpAndSum(d, row, padded, maxes_[i]);
        }
        ScaleRow(d, row, padded, 1.0f / sums_[i]);
        std::copy_n(row, count, Probabilities(i) + first_key);
      }
    }
  }

  float* Probabilities(size_t i) const { return task_rows_.Probabilities(KernelRow(i)); }

  const AttentionParams& params_;
  const CoreTask& task_;
  const TaskRows& task_rows_;
  const MaskPlan& masks_;
  const HeadScratch& layout_;
  const int64_t first_row_;
  const size_t rows_;
  const KvPages& pages_;
  const typename Kind::KeyLoader key_loader_ = Kind::Keys(pages_);
  const typename Kind::ValueLoader value_loader_ = Kind::Values(pages_);
  const bool has_extras_ = pages_.key_page_bytes > pages_.key_codes_bytes ||
                           pages_.value_page_bytes > pages_.value_codes_bytes;
  float* scores_;
  float* context_;
  float* query_tile_;
  float* maxes_;  // running softmax max and sum per row
  float* sums_;
  uint16_t* query_bits_;        // bf16_dot: the query rows, rounded
  uint16_t* probability_bits_;  // bf16_dot: the score tile's probabilities, rounded
  int16_t* query_codes_;        // int8 key products: the query rows' codes
  int16_t* probability_codes_;  // int8 value products: the score tile's weights' codes
  T* value_tile_;               // values in keys: the page's V tile
  const bool bf16_dot_, int8_dot_;
  const bool query_codes_run_;  // int8 keys meet the query's codes (QueryCodesFor)
  const bool int8_values_;      // int8 values meet the probabilities' codes
  int64_t split_offset_ = 0;    // from the task's partial results to the split's
  int64_t positions_[kMaxQueryStep], heads_[kMaxQueryStep];  // of each row
  float query_scales_[kMaxQueryStep];        // int8 key products: each row's scale
  float probability_scales_[kMaxQueryStep];  // int8 value products: each row's scale
};

// Whether query steps over bfloat16 pages run bf16 products (bf16_tile_matmul.h):
// only from an AVX-512 target (so MHA_MAX_ISA caps it) of a CPU with AVX512_BF16.
// Never chosen by a step's row count: that depends on the thread count, the
// chunking of a prompt and the other sequences of a step, and the two paths round
// q and P differently (docs/errors.md promises the same bits for all of them).
inline bool Bf16DotProducts() {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return CpuHasAvx512Bf16();
#else
  return false;
#endif
}

template <class Kind, class D>
void AttendRows(D d, const AttentionParams& params, const CoreTask& task,
                const TaskRows& rows, const MaskPlan& masks, const HeadScratch& layout,
                float* scratch, const KvPages& pages) {
  const int64_t count = KernelRows(task);
  const bool bf16_dot = Kind::kBf16Products && Bf16DotProducts();
  // A decode step's heads, or rows on AMX tiles, meet each K/V tile in one step
  // (kMaxQueryStep); the fp32 and integer micro-tiles keep their score tile in L1.
  const int64_t step = static_cast<int64_t>(
      task.rows == 1 || (bf16_dot && AmxTileProducts()) ? kMaxQueryStep : kQueryStep);
  for (int64_t first = 0; first < count; first += step) {
    const size_t rows_in_step = static_cast<size_t>(std::min(step, count - first));
    HWY_DASSERT(rows_in_step <= layout.rows);
    const size_t head_dim = static_cast<size_t>(params.head_dim);
    const bool int8_dot =
        Kind::kInt8KeyProducts && QueryCodesFor(head_dim) && Int8DotProductsRun(head_dim);
    QueryStep<Kind>(params, task, rows, masks, layout, scratch, pages, first,
                    rows_in_step, bf16_dot, int8_dot)
        .Run(d);
  }
}

// Runs one task over its (batch, KV head)'s pages of kind Kind (attention_head.h).
template <class Kind>
void AttendHeadOf(const AttentionParams& params, const CoreTask& task,
                  const KvPages& pages, const MaskPlan& masks, const HeadScratch& layout,
                  float* partials, float* scratch) {
  const hn::ScalableTag<float> d;
  HWY_DASSERT(static_cast<int64_t>(layout.key_step) % pages.page_size == 0);
  HWY_DASSERT(KernelRows(task) > 0 && task.key_begin <= task.key_end);
  HWY_DASSERT(!params.rotary || params.query_positions);
  HWY_DASSERT(params.values_in_keys == pages.values_in_keys);
  HWY_DASSERT(!params.values_in_keys ||
              (params.value_offset % static_cast<int64_t>(kPanelWidth) == 0 &&
               params.value_offset + params.ValueHeadDim() <= params.head_dim));
  const TaskRows rows(params, task, partials);
  const AmxTileSession tiles;  // one tile configuration for the task's products
  AttendRows<Kind>(d, params, task, rows, masks, layout, scratch, pages);
}

}  // namespace HWY_NAMESPACE
}  // namespace internal
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_ATTENTION_HEAD_INL_H_
