// What Python holds: a layer (its engine, head shard and whether inputs are
// batch-first) and caches that Python threads may share (Guarded: the layer calls run
// with the GIL released, so every call on a cache holds its mutex and concurrent calls
// run one after another; the mutex is taken with the GIL released, so a waiting
// thread blocks no other).
#pragma once

#include <pybind11/pybind11.h>

#include <mutex>
#include <optional>
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
