// Test tiles laid out as the scaled loaders (tile_loaders-inl.h) read a KV page: each
// tile's codes followed by its scales, one buffer per page.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace mha::testing {

struct ScaledPages {
  std::vector<std::vector<uint8_t>> buffers;

  // Tile i (tile_bytes of codes) then scale_count floats of scales[i], for i < count.
  ScaledPages(const void* const* tiles, size_t count, size_t tile_bytes,
              const float* const* scales, size_t scale_count) {
    for (size_t i = 0; i < count; ++i) {
      std::vector<uint8_t> page(tile_bytes + scale_count * sizeof(float));
      std::memcpy(page.data(), tiles[i], tile_bytes);
      std::memcpy(page.data() + tile_bytes, scales[i], scale_count * sizeof(float));
      buffers.push_back(std::move(page));
    }
  }
  template <typename T>
  std::vector<const T*> Pages() const {
    std::vector<const T*> pages;
    for (const auto& page : buffers)
      pages.push_back(reinterpret_cast<const T*>(page.data()));
    return pages;
  }
};

}  // namespace mha::testing
