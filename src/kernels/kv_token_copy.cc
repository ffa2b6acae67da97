// CopyToken: element by element through the tiles' offsets (the K^T tile's column
// and the V tile's row), so every storage's layout, paired bf16 rows included, is
// moved without converting a value. Values in keys (MLA's latent) move with them.
#include "src/kernels/kv_token_copy.h"

#include <cstring>

#include "src/kernels/int4_codes.h"

namespace mha::internal {
namespace {

// keys: false for keys per channel, which the caller requantises (channel_keys.h).
template <typename T>
void CopyElements(const KvPages& pages, int64_t head_dim, int64_t from, int64_t to,
                  bool keys = true) {
  const size_t page_size = static_cast<size_t>(pages.page_size);
  const int64_t from_page = from / pages.page_size, to_page = to / pages.page_size;
  const size_t from_slot = static_cast<size_t>(from % pages.page_size);
  const size_t to_slot = static_cast<size_t>(to % pages.page_size);
  const T* key_from = reinterpret_cast<const T*>(pages.KeyPage(from_page));
  T* key_to = reinterpret_cast<T*>(pages.KeyPage(to_page));
  const T* value_from = reinterpret_cast<const T*>(pages.ValuePage(from_page));
  T* value_to = reinterpret_cast<T*>(pages.ValuePage(to_page));
  const size_t dims = static_cast<size_t>(head_dim);
  for (size_t k = 0; k < dims; ++k) {
    if (keys) {
      key_to[TileOffset<T>(k, to_slot, dims)] =
          key_from[TileOffset<T>(k, from_slot, dims)];
    }
    if (pages.values_in_keys) continue;  // the values moved with the keys
    value_to[TileOffset<T>(to_slot, k, page_size)] =
        value_from[TileOffset<T>(from_slot, k, page_size)];
  }
}

// int4 values (keys per channel are the caller's): the codes nibble by nibble, the
// token scale and each group's scale and minimum.
void CopyInt4Value(const KvPages& pages, int64_t head_dim, int64_t from, int64_t to) {
  const int64_t size = pages.page_size;
  const int64_t from_page = from / size, to_page = to / size;
  const int64_t from_slot = from % size, to_slot = to % size;
  const size_t padded = RoundUp(static_cast<size_t>(head_dim), kPanelWidth);
  const size_t rows = static_cast<size_t>(size);
  for (size_t k = 0; k < padded; ++k) {
    SetInt4(pages.ValuePage(to_page), static_cast<size_t>(to_slot), k, rows,
            GetInt4(pages.ValuePage(from_page), static_cast<size_t>(from_slot), k, rows));
  }
  pages.ValueScales(to_page)[to_slot] = pages.ValueScales(from_page)[from_slot];
  for (int64_t g = 0; g < pages.value_groups; ++g) {
    pages.ValueGroupScales(to_page)[g * size + to_slot] =
        pages.ValueGroupScales(from_page)[g * size + from_slot];
    pages.ValueGroupMins(to_page)[g * size + to_slot] =
        pages.ValueGroupMins(from_page)[g * size + from_slot];
  }
}

}  // namespace

void CopyToken(const KvPages& pages, int64_t head_dim, int64_t from, int64_t to) {
  if (from == to) return;
  switch (pages.storage) {
    case KvStorage::kFloat32:
      return CopyElements<float>(pages, head_dim, from, to);
    case KvStorage::kBFloat16:
      return CopyElements<uint16_t>(pages, head_dim, from, to);
    case KvStorage::kFp8E4M3ScaleFree:
    case KvStorage::kFp8E5M2ScaleFree:
      return CopyElements<uint8_t>(pages, head_dim, from, to);
    case KvStorage::kInt4:
      return CopyInt4Value(pages, head_dim, from, to);
    case KvStorage::kInt8:
    case KvStorage::kInt8ChannelKeys:
    case KvStorage::kFp8E4M3:
    case KvStorage::kFp8E5M2: {
      const bool keys = !pages.channel_key_scales;
      CopyElements<uint8_t>(pages, head_dim, from, to, keys);
      const int64_t size = pages.page_size;
      if (keys) {
        pages.KeyScales(to / size)[to % size] = pages.KeyScales(from / size)[from % size];
      }
      if (!pages.values_in_keys) {
        pages.ValueScales(to / size)[to % size] =
            pages.ValueScales(from / size)[from % size];
      }
      return;
    }
  }
}

}  // namespace mha::internal
