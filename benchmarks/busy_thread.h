// BusyThread: one thread computing for as long as it lives, the neighbour a serving
// process has (a tokenizer, a network thread, another request). A case run beside
// one ("/busy_thread") against the same case alone is the slowdown a shared CPU
// costs: with 2 threads of mha on 2 cores, a fair share is 2/3 of the machine, 1.5x.
#pragma once

#include <benchmark/benchmark.h>

#include <atomic>
#include <thread>

namespace mha::bench {

class BusyThread {
 public:
  BusyThread()
      : thread_([this] {
          double x = 1.0;
          while (!stop_.load(std::memory_order_relaxed)) {
            for (int i = 0; i < 4096; ++i) x = x * 0.999999 + 1e-6;
          }
          result_ = x;
        }) {}
  ~BusyThread() {
    stop_.store(true, std::memory_order_relaxed);
    thread_.join();
  }
  BusyThread(const BusyThread&) = delete;
  BusyThread& operator=(const BusyThread&) = delete;

 private:
  std::atomic<bool> stop_{false};
  double result_ = 0.0;
  std::thread thread_;  // last: starts once stop_ is set up
};

// Runs `bench(state)` with a BusyThread beside it.
template <class Bench>
auto BesideBusyThread(Bench bench) {
  return [bench](benchmark::State& state) {
    const BusyThread busy;
    bench(state);
  };
}

}  // namespace mha::bench
