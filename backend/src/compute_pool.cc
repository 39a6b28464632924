#include "compute_pool.h"

#include <ATen/Parallel.h>
#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "settings.h"
#include "triton_util.h"

namespace bertserve {

void NameThisThread(const char* name) {
  char kept[16] = {};
  std::snprintf(kept, sizeof(kept), "%s", name);
  pthread_setname_np(pthread_self(), kept);
}

ComputePool::ComputePool(int workers, int threads, const char* name) : threads_(threads) {
  for (int i = 0; i < std::max(1, workers); ++i) {
    workers_.emplace_back([this, name] {
      NameThisThread(name);
      Work();
    });
  }
}

ComputePool::~ComputePool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& w : workers_) w.join();
}

void ComputePool::Post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void ComputePool::Work() {
  at::set_num_threads(threads_);  // a per-thread OpenMP setting: this thread leads every team it starts
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // A task that throws is logged and dropped: an exception leaving a pool thread would terminate the server.
    try {
      task();
    } catch (const std::exception& e) {
      BERTSERVE_LOG(ERROR, std::string("a compute task failed: ") + e.what());
    } catch (...) {
      BERTSERVE_LOG(ERROR, "a compute task failed: unknown exception");
    }
  }
}

PoolTurns::PoolTurns(ComputePool& pool, std::string name, std::function<void()> serve, std::function<bool()> busy)
    : pool_(pool), name_(std::move(name)), serve_(std::move(serve)), busy_(std::move(busy)) {}

void PoolTurns::Wake() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (posted_) return;
    posted_ = true;
  }
  Post();
}

void PoolTurns::Drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return !posted_; });
}

void PoolTurns::Post() noexcept {
  try {
    pool_.Post([this] { Turn(); });
    return;
  } catch (const std::exception& e) {
    BERTSERVE_LOG(ERROR, name_ + ": cannot post to the compute pool: " + e.what());
  }
  std::lock_guard<std::mutex> lock(mutex_);
  posted_ = false;
  idle_.notify_all();  // under the lock: a Drain that returns may destroy this object
}

void PoolTurns::Turn() noexcept {
  serve_();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    posted_ = busy_();
    if (!posted_) {
      idle_.notify_all();  // under the lock: a Drain that returns may destroy this object
      return;
    }
  }
  Post();
}

namespace {
std::mutex pools_mutex;
std::map<int, std::unique_ptr<ComputePool>> pools;
}  // namespace

ComputePool& SharedComputePool(int threads) {
  std::lock_guard<std::mutex> lock(pools_mutex);
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<ComputePool>(UsableCpus() / threads, threads, "bs-compute");
  return *pool;
}

void ReleaseComputePools() {
  std::lock_guard<std::mutex> lock(pools_mutex);
  pools.clear();
}

}  // namespace bertserve
