// Per-target zero-point terms of int4 pages (the int4 kind: x ~ min + scale x
// code). The tile products take the scaled codes; what the minimums add is
// separable and added here:
//   q . k_t = sum_c q_c s_c code_ct + sum_c q_c min_c (one term per query row and
//   page: keys per channel share their minimums over the page's tokens);
//   sum_t p_t v_tc = sum_t p_t s_tg code_tc + sum_t p_t min_tg (one term per row,
//   value group g and key tile: every channel of the group shares it).

#if defined(MHA_KERNELS_ZERO_POINTS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef MHA_KERNELS_ZERO_POINTS_INL_H_
#undef MHA_KERNELS_ZERO_POINTS_INL_H_
#else
#define MHA_KERNELS_ZERO_POINTS_INL_H_
#endif

#include <algorithm>
#include <cstddef>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mha {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows whose sums run side by side: one row's multiply-adds wait on each other's
// latency (a lone query row's q . mins was 9% of an int4 decode step); four
// independent sums keep the FMA units busy.
constexpr size_t kZeroPointRows = 4;

// Where rows [first, first + kZeroPointRows) of `rows` rows `stride` apart start; rows
// past the last repeat it (their sums are computed and dropped).
inline void ZeroPointRows(const float* base, size_t stride, size_t first, size_t rows,
                          const float* (&at)[kZeroPointRows]) {
  for (size_t r = 0; r < kZeroPointRows; ++r)
    at[r] = base + std::min(first + r, rows - 1) * stride;
}

// Sums of kZeroPointRows rows' products with one vector b, lane by lane, over any
// number of runs (pages); then one reduction per row.
template <class D>
struct RowSums {
  hn::Vec<D> s0, s1, s2, s3;
  explicit RowSums(D d) : s0(hn::Zero(d)), s1(s0), s2(s0), s3(s0) {}
  // += a[r][from + i] b[i] for i < n (n % Lanes(d) == 0).
  HWY_INLINE void Add(D d, const float* const (&a)[kZeroPointRows], size_t from,
                      const float* HWY_RESTRICT b, size_t n) {
    for (size_t i = 0; i < n; i += hn::Lanes(d)) {
      const auto v = hn::LoadU(d, b + i);
      s0 = hn::MulAdd(hn::LoadU(d, a[0] + from + i), v, s0);
      s1 = hn::MulAdd(hn::LoadU(d, a[1] + from + i), v, s1);
      s2 = hn::MulAdd(hn::LoadU(d, a[2] + from + i), v, s2);
      s3 = hn::MulAdd(hn::LoadU(d, a[3] + from + i), v, s3);
    }
  }
  HWY_INLINE void Reduce(D d, float (&out)[kZeroPointRows]) const {
    out[0] = hn::GetLane(hn::SumOfLanes(d, s0));
    out[1] = hn::GetLane(hn::SumOfLanes(d, s1));
    out[2] = hn::GetLane(hn::SumOfLanes(d, s2));
    out[3] = hn::GetLane(hn::SumOfLanes(d, s3));
  }
};

// row[0, n) += term (n % Lanes(d) == 0).
template <class D>
HWY_INLINE void AddTerm(D d, float term, float* HWY_RESTRICT row, size_t n) {
  for (size_t i = 0; i < n; i += hn::Lanes(d)) {
    hn::StoreU(hn::Add(hn::LoadU(d, row + i), hn::Set(d, term)), d, row + i);
  }
}

// Row i of the scores (`stride` apart, [0, n), n % Lanes(d) == 0) += q_i . mins: one
// page's key minimums against `rows` query rows (any head_dim).
template <class D>
HWY_INLINE void AddKeyZeroPoints(D d, const float* HWY_RESTRICT query,
                                 size_t query_stride, size_t rows,
                                 const float* HWY_RESTRICT mins, size_t head_dim,
                                 float* HWY_RESTRICT scores, size_t stride, size_t n) {
  const size_t whole = head_dim / hn::Lanes(d) * hn::Lanes(d);
  for (size_t first = 0; first < rows; first += kZeroPointRows) {
    const float* q[kZeroPointRows];
    ZeroPointRows(query, query_stride, first, rows, q);
    RowSums<D> sums(d);
    sums.Add(d, q, 0, mins, whole);
    float terms[kZeroPointRows];
    sums.Reduce(d, terms);
    for (size_t r = 0; r < kZeroPointRows && first + r < rows; ++r) {
      for (size_t c = whole; c < head_dim; ++c) terms[r] += q[r][c] * mins[c];
      AddTerm(d, terms[r], scores + (first + r) * stride, n);
    }
  }
}

// Context row i (`dim` apart) += for each group g of `group` columns, the sum over
// a key tile's keys t < n of p_it mins_g(t): its pages' value minimums, page q's
// group g at page_mins[q] + g x page_size (n, group and page_size multiples of
// Lanes(d)). One sum per row and group over the whole tile.
template <class D>
HWY_INLINE void AddValueZeroPoints(D d, const float* HWY_RESTRICT probabilities,
                                   size_t stride, size_t rows,
                                   const float* const* page_mins, size_t page_size,
                                   size_t n, size_t group, float* HWY_RESTRICT context,
                                   size_t dim) {
  for (size_t first = 0; first < rows; first += kZeroPointRows) {
    const float* p[kZeroPointRows];
    ZeroPointRows(probabilities, stride, first, rows, p);
    for (size_t column = 0, g = 0; column < dim; column += group, ++g) {
      RowSums<D> sums(d);
      for (size_t q = 0; q * page_size < n; ++q) {
        sums.Add(d, p, q * page_size, page_mins[q] + g * page_size,
                 std::min(page_size, n - q * page_size));
      }
      float terms[kZeroPointRows];
      sums.Reduce(d, terms);
      for (size_t r = 0; r < kZeroPointRows && first + r < rows; ++r) {
        AddTerm(d, terms[r], context + (first + r) * dim + column,
                std::min(group, dim - column));
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace mha
HWY_AFTER_NAMESPACE();

#endif  // MHA_KERNELS_ZERO_POINTS_INL_H_
