// ThreadPool: workers sleep on a condition variable; a parallel_for hands out chunks from a shared counter.
#include "core/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "core/logging.h"

namespace llmserve {
namespace {

thread_local bool t_inside_pool_task = false;

int default_num_threads() {
  if (const char* env = std::getenv("LLMSERVE_NUM_THREADS")) {
    int n = std::atoi(env);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

std::unique_ptr<ThreadPool>& global_pool() {
  static std::unique_ptr<ThreadPool> pool = std::make_unique<ThreadPool>(default_num_threads());
  return pool;
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int /*worker_index*/) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    ++active_;
    run_chunks(lock);
    if (--active_ == 0) done_cv_.notify_all();
  }
}

void ThreadPool::run_chunks(std::unique_lock<std::mutex>& lock) {
  while (next_ < n_) {
    const int64_t begin = next_;
    const int64_t end = std::min(n_, begin + chunk_);
    next_ = end;
    lock.unlock();
    t_inside_pool_task = true;
    (*fn_)(begin, end);
    t_inside_pool_task = false;
    lock.lock();
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  if (num_threads_ == 1 || t_inside_pool_task || n <= min_chunk) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // Aim for a few chunks per thread so uneven chunks balance out.
  int64_t chunk = std::max(min_chunk, (n + 4 * num_threads_ - 1) / (4 * num_threads_));
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  n_ = n;
  chunk_ = chunk;
  next_ = 0;
  ++generation_;
  ++active_;  // the caller
  work_cv_.notify_all();
  run_chunks(lock);
  --active_;
  done_cv_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

ThreadPool& ThreadPool::global() { return *global_pool(); }

void ThreadPool::set_global_num_threads(int num_threads) {
  CHECK_GT(num_threads, 0);
  if (global_pool()->num_threads() != num_threads) global_pool() = std::make_unique<ThreadPool>(num_threads);
}

void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn) {
  ThreadPool::global().parallel_for(n, min_chunk, fn);
}

}  // namespace llmserve
