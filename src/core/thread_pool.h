// A fixed pool of worker threads with a blocking parallel_for, used by CPU kernels and batch tokenization.
// The calling thread takes part in the work, so a pool of N threads runs N-way parallel with N-1 workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace llmserve {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Calls fn(begin, end) on disjoint sub-ranges covering [0, n), at least `min_chunk` items each (except the
  // last); returns when all are done. Nested calls from inside fn run serially on the calling thread.
  void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool: $LLMSERVE_NUM_THREADS threads, else the number of hardware threads.
  static ThreadPool& global();
  // Replaces the global pool's size (call before heavy use; not concurrently with parallel_for).
  static void set_global_num_threads(int num_threads);

 private:
  void worker_loop(int worker_index);
  // Claims and runs chunks of the current parallel_for until none is left; `lock` (on mu_) is held on entry and
  // exit, released while a chunk runs.
  void run_chunks(std::unique_lock<std::mutex>& lock);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  std::mutex call_mu_;  // one parallel_for at a time
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  int64_t next_ = 0;
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// Shorthand for ThreadPool::global().parallel_for(...).
void parallel_for(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace llmserve
