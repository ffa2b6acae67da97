// What Python holds: a layer (its engine, head shard and whether inputs are
// batch-first) and caches that Python threads may share (Guarded: the layer calls run
// with the GIL released, so every call on a cache holds its mutex and concurrent calls
// run one after another; the mutex is taken with the GIL released, so a waiting
// thread blocks no other).
#pragma once

#include <pybind11/pybind11.h>

#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "mha/mha.hpp"

namespace mha::python {

namespace py = pybind11;

template <class Engine>
struct PyLayer {
  Engine engine;
  std::optional<HeadShard> head_shard;
  bool batch_first;
};

struct LatentLayer {
  MultiheadLatentAttention engine;
};

// make(config) with the config a cache of `layer` is shaped by: a
// MultiheadAttention's AttentionConfig or a MultiheadLatentAttention's
// LatentAttentionConfig.
template <class Make>
auto WithCacheConfig(py::handle layer, const Make& make) {
  if (py::isinstance<PyLayer<MultiheadAttention>>(layer)) {
    return make(layer.cast<const PyLayer<MultiheadAttention>&>().engine.config());
  }
  if (py::isinstance<LatentLayer>(layer)) {
    return make(layer.cast<const LatentLayer&>().engine.config());
  }
  throw py::type_error(
      "mha: layer: expected an mha.MultiheadAttention or mha.MultiheadLatentAttention, "
      "got " +
      std::string(py::str(layer.get_type().attr("__name__"))));
}

template <class Cache>
class Guarded {
 public:
  template <class... Args>
  explicit Guarded(Args&&... args) : cache_(std::forward<Args>(args)...) {}

  template <class F>
  auto Locked(const F& run) {
    py::gil_scoped_release release;
    const std::lock_guard<std::mutex> lock(mutex_);
    return run(cache_);
  }

 private:
  Cache cache_;
  std::mutex mutex_;
};

}  // namespace mha::python
