// PageSource: how the attention core and the cache append find the pages of (batch,
// KV head). A non-owning reference to the caller's lookup, so that handing it down
// allocates nothing (a std::function holding a capture of more than two pointers
// does). The lookup must outlive every use: temporaries are refused at compile time.
#pragma once

#include <cstdint>

#include "src/kv/kv_pages.h"

namespace mha::internal {

class PageSource {
 public:
  PageSource() = default;
  template <class Lookup>
  PageSource(const Lookup& lookup)  // NOLINT(google-explicit-constructor): a view
      : lookup_(&lookup), call_(&Call<Lookup>) {}
  template <class Lookup>
  PageSource(const Lookup&& lookup) = delete;  // it would dangle

  explicit operator bool() const { return call_ != nullptr; }
  KvPages operator()(int64_t batch, int64_t kv_head) const {
    return call_(lookup_, batch, kv_head);
  }

 private:
  template <class Lookup>
  static KvPages Call(const void* lookup, int64_t batch, int64_t kv_head) {
    return (*static_cast<const Lookup*>(lookup))(batch, kv_head);
  }

  const void* lookup_ = nullptr;
  KvPages (*call_)(const void*, int64_t, int64_t) = nullptr;
};

}  // namespace mha::internal
