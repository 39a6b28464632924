// The threads every CPU forward of the server runs on, shared by all encoder models and instances.
//
// Each thread that runs a forward leads an OpenMP team of `threads`. libgomp cuts its spin-wait to ~100
// iterations once the process manages more OpenMP threads than it has CPUs, and every parallel region then
// pays a futex sleep and wake: with bert and bert_fp32 loaded on 2 CPUs, each leading a 2-thread team from its
// own instance thread, MiniLM int8 at 1 x 16 tokens took 7.0 ms per forward instead of 2.4 ms. So the forwards
// run on cpus / threads pool threads (at least one), whatever the number of models and instances: the teams
// never outnumber the CPUs, and forwards that would compete for the same cores queue for them instead.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace bertserve {

class ComputePool {
 public:
  // `name` names its threads (at most 15 characters; `top -H` and debuggers show it).
  ComputePool(int workers, int threads, const char* name);
  ~ComputePool();  // finishes queued work, then joins
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  // Runs `task` on a pool thread, after the tasks posted before it. A task should not throw: one that does is
  // logged and dropped, and whatever it held is unwound (a Pending it owned answers its client as it goes).
  void Post(std::function<void()> task);
  // Runs `task` on a pool thread and waits for it: its result, or its exception rethrown here.
  template <class F>
  auto Call(F task) -> decltype(task()) {
    std::promise<decltype(task())> done;
    Post([&task, &done] {
      try {
        done.set_value(task());
      } catch (...) {
        done.set_exception(std::current_exception());
      }
    });
    return done.get_future().get();
  }

 private:
  void Work();
  int threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

// A CPU instance's turns on a pool: Wake posts its `serve` step unless one is posted already; after each step the
// next is posted while `busy` says work is left, to the back of the pool's queue (models and instances take turns).
// `serve` and `busy` must not throw. A step that cannot be posted is logged; the next Wake tries again.
class PoolTurns {
 public:
  PoolTurns(ComputePool& pool, std::string name, std::function<void()> serve, std::function<bool()> busy);
  void Wake() noexcept;
  void Drain();  // waits until no step is posted (call once nothing wakes it any more)

 private:
  void Post() noexcept;
  void Turn() noexcept;

  ComputePool& pool_;
  std::string name_;
  std::function<void()> serve_;
  std::function<bool()> busy_;
  std::mutex mutex_;
  std::condition_variable idle_;
  bool posted_ = false;
};

// Names the calling thread (at most 15 characters are kept).
void NameThisThread(const char* name);

// The pool for forwards of `threads` intra-op threads (one per distinct value, made on first use, kept until
// the backend unloads).
ComputePool& SharedComputePool(int threads);
void ReleaseComputePools();

}  // namespace bertserve
