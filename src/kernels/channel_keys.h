// Keys quantised per channel (KvStorage::kInt8ChannelKeys and kInt4, KIVI's scheme): a
// page's K^T tile holds int8 codes with one scale per channel over the page's tokens
// (int4: a scale and a minimum, int4_codes.h), so an outlier channel sets its own
// scale only. Its scale changes as tokens arrive, so a
// cache keeps its sequences' partial last page in fp32 (the residual, KvPages::
// key_residual) and each write requantises that page from it whole: the kernel reads
// one layout for every page. (KIVI attends the residual in full precision instead.)
// A key with a non-finite element codes as zeros with token scale NaN: every score
// it enters is NaN, as with float pages.
#pragma once

#include <cstdint>

#include "src/kernels/kv_pages.h"

namespace mha::internal {

// Page `page` from the `count` fp32 key rows `rows` (row t: token t of the page,
// head_dim floats): codes, token scales and channel scales; columns from count on
// zeroed.
void QuantizeKeyPage(const KvPages& pages, int64_t page, const float* rows, int64_t count,
                     int64_t head_dim);

// The key of token `position` as the kernel sees it (code x channel scale x token
// scale), into `row`; exact for tokens of the residual's page below `length`.
void ReadKey(const KvPages& pages, int64_t position, int64_t length, int64_t head_dim,
             float* row);

// Tokens [first, first + count) (first a page boundary) from fp32 rows: whole pages
// quantised, a partial last one through the residual.
void WriteKeys(const KvPages& pages, int64_t first, const float* rows, int64_t count,
               int64_t head_dim);

// After a sequence went from `old_length` tokens down to `length`: the residual
// made to hold the new partial last page (dequantised when that page was full
// before: its fp32 keys are gone), and the page requantised from it, as if
// `length` tokens had been appended.
void RestoreKeyResidual(const KvPages& pages, int64_t old_length, int64_t length,
                        int64_t head_dim);

}  // namespace mha::internal
