// TensorParallelModel: rank threads, the per-step input broadcast, per-rank KV caches and activation arenas.
#include "runtime/tensor_parallel_model.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "model/tensor_parallel.h"
#include "runtime/cpu_communicator.h"
#include "runtime/nccl_communicator.h"

#ifdef LLMSERVE_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace llmserve {
namespace {

// Ranks 1..N-1 as threads; run(fn) calls fn(r) for every rank (rank 0 on the caller) and returns when all are done.
class RankThreads {
 public:
  explicit RankThreads(int num_ranks) {
    for (int r = 1; r < num_ranks; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  void run(const std::function<void(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn_ = &fn;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    work_cv_.notify_all();
    fn(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return pending_ == 0; });
    fn_ = nullptr;
  }

 private:
  void loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        fn = fn_;
      }
      (*fn)(rank);
      {
        std::lock_guard<std::mutex> lock(mu_);
        --pending_;
      }
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  const std::function<void(int)>* fn_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

void use_device(Device device) {
#ifdef LLMSERVE_WITH_CUDA
  if (!device.is_cpu()) CHECK(cudaSetDevice(device.index) == cudaSuccess) << "cudaSetDevice " << device.to_string();
#else
  (void)device;
#endif
}

// Elements from a tensor's first to its last element (its strides may skip some): what a broadcast must move.
int64_t span_of(const Tensor& t) {
  if (t.numel() == 0) return 0;
  int64_t span = 1;
  for (int d = 0; d < t.dim(); ++d) span += (t.size(d) - 1) * t.stride(d);
  return span;
}

Tensor flat(const Tensor& t) { return Tensor::from_blob(t.raw_data(), {span_of(t)}, t.dtype(), nullptr, t.device()); }

class TensorParallelModel final : public CausalLM {
 public:
  TensorParallelModel(int world_size, int first_rank, int total_ranks)
      : threads_(world_size),
        ranks_(static_cast<size_t>(world_size)),
        first_rank_(first_rank),
        total_ranks_(total_ranks) {}

  ~TensorParallelModel() override {
    // Each rank's device memory is released on its own thread (its device current).
    threads_.run([this](int r) {
      use_device(ranks_[r].device);
      ranks_[r] = Rank{};
    });
  }

  Status load(const std::string& model_dir, const ModelLoadOptions& options, const ModelConfig* config) {
    const int world = static_cast<int>(ranks_.size());
    for (int r = 0; r < world; ++r) {
      ranks_[r].device = options.device.is_cpu() ? Device::cpu() : Device::cuda(options.device.index + r);
    }
    if (options.device.is_cpu()) {
      cpu_group_ = std::make_unique<CpuCommunicatorGroup>(world);
      for (int r = 0; r < world; ++r) ranks_[r].comm = &cpu_group_->rank(r);
    } else {
      RETURN_IF_ERROR(check_devices(options.device));
      RETURN_IF_ERROR(join_nccl());
    }
    std::vector<Status> status(static_cast<size_t>(world));
    threads_.run([&](int r) {
      use_device(ranks_[r].device);
      ModelLoadOptions mine = options;
      mine.device = ranks_[r].device;
      mine.communicator = ranks_[r].comm;
      StatusOr<std::unique_ptr<CausalLM>> model = load_model(model_dir, mine, config);
      if (model.ok()) {
        ranks_[r].model = std::move(model).value();
      } else {
        status[r] = model.status().with_context("tensor-parallel rank " + std::to_string(first_rank_ + r));
      }
    });
    for (const Status& s : status) RETURN_IF_ERROR(s);
    use_device(ranks_[0].device);
    return ok_status();
  }

  const ModelConfig& config() const override { return ranks_[0].model->config(); }
  Device device() const override { return ranks_[0].device; }
  DType activation_dtype() const override { return ranks_[0].model->activation_dtype(); }
  int64_t num_kv_heads_per_rank() const override { return ranks_[0].model->num_kv_heads_per_rank(); }
  std::vector<Device> devices() const override {
    std::vector<Device> out;
    for (const Rank& r : ranks_) out.push_back(r.device);
    return out;
  }
  // Several devices' streams cannot be captured from rank 0's thread: graphs only for one rank.
  bool cuda_graph_capturable() const override { return ranks_.size() == 1; }

  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override {
    threads_.run([&](int r) {
      if (r == 0) {
        broadcast_inputs(ranks_[0], batch);
        ranks_[0].model->forward(batch, kv_cache, logits);
        return;
      }
      Rank& rank = ranks_[r];
      use_device(rank.device);
      ensure_cache(rank, kv_cache);
      ForwardBatch mine = mirror_inputs(rank, batch);
      broadcast_inputs(rank, mine);
      Tensor no_logits;
      rank.model->forward(mine, rank.cache, no_logits);
    });
  }

  // Rank 0 plans into the caller's planner (the runner's arena on rank 0's device); every other rank gets an arena
  // of the same plan on its own device, released when the caller's is (bind_activations back to the previous one).
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override {
    ranks_[0].model->plan_activations(limits, planner);
    threads_.run([&](int r) {
      if (r == 0) return;
      use_device(ranks_[r].device);
      ranks_[r].arenas.push_back(std::make_unique<ActivationMemory>(*ranks_[r].model, limits));
    });
  }

  void bind_activations(const Arena* arena) override {
    ranks_[0].model->bind_activations(arena);
    const Arena* previous = bound_.size() >= 2 ? bound_[bound_.size() - 2] : nullptr;
    if (!bound_.empty() && arena == previous) {  // an ActivationMemory being destroyed: drop the ranks' arenas too
      bound_.pop_back();
      // The outermost one gone (its runner destroyed): the ranks' caches go too, so memory measured next (the real
      // runner's plan after the profiling one) is not held by a dead runner's cache.
      const bool last = bound_.empty();
      threads_.run([&](int r) {
        if (r == 0) return;
        use_device(ranks_[r].device);
        if (!ranks_[r].arenas.empty()) ranks_[r].arenas.pop_back();
        if (last) {
          ranks_[r].cache = KVCacheTensors{};
          ranks_[r].cache_owner = nullptr;
        }
      });
    } else {
      bound_.push_back(arena);
    }
  }
  const Arena* bound_activations() const override { return ranks_[0].model->bound_activations(); }

 private:
  // Rank r's copies of the step inputs (ranks >= 1): buffers grown on demand, on the rank's device.
  enum Field { kInputIds, kPositions, kLogitsIndices, kQueryStartLoc, kSeqLens, kBlockTable, kSlotMapping, kNumFields };
  struct Rank {
    std::unique_ptr<CausalLM> model;
    Device device;
    Communicator* comm = nullptr;
    std::unique_ptr<NcclCommunicator> nccl;
    KVCacheTensors cache;               // ranks >= 1: this rank's heads of the runner's cache shape
    const void* cache_owner = nullptr;  // rank 0's key[0] the cache was made for (a new runner: a new cache)
    Tensor inputs[kNumFields];
    Tensor workspace;  // CUDA split-K scratch (zeroed once)
    std::vector<std::unique_ptr<ActivationMemory>> arenas;
  };

  Status check_devices(Device base) {
#ifdef LLMSERVE_WITH_CUDA
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    const int needed = base.index + static_cast<int>(ranks_.size());
    if (needed > count) {
      return invalid_argument("--tensor-parallel-size " + std::to_string(total_ranks_) + " on " + base.to_string() +
                              " needs " + std::to_string(ranks_.size()) + " CUDA devices from cuda:" +
                              std::to_string(base.index) + " on this node; " + std::to_string(count) + " present");
    }
    return ok_status();
#else
    return invalid_argument("--device " + base.to_string() + ": this build has no CUDA support");
#endif
  }

  // NCCL: one communicator per rank thread, all joining concurrently (ncclCommInitRank blocks until every rank of
  // the world joined). The id is made here (one node) — exchange_blob hands it to other nodes when there are some.
  Status join_nccl() {
    if (!nccl_available()) return failed_precondition("tensor parallelism on CUDA needs NCCL; this build has none");
    ASSIGN_OR_RETURN(std::string id, new_nccl_unique_id());
    std::vector<Status> status(ranks_.size());
    threads_.run([&](int r) {
      StatusOr<std::unique_ptr<NcclCommunicator>> c =
          NcclCommunicator::create(id, total_ranks_, first_rank_ + r, ranks_[r].device.index);
      if (c.ok()) {
        ranks_[r].nccl = std::move(c).value();
        ranks_[r].comm = ranks_[r].nccl.get();
      } else {
        status[r] = c.status();
      }
    });
    for (const Status& s : status) RETURN_IF_ERROR(s);
    return ok_status();
  }

  // Rank r's KV cache: the runner's per-layer shape (this rank holds as many heads as rank 0), made once per runner.
  void ensure_cache(Rank& rank, const KVCacheTensors& driver) {
    const void* owner = driver.key.empty() ? nullptr : driver.key[0].raw_data();
    if (rank.cache_owner == owner && rank.cache.key.size() == driver.key.size() &&
        (driver.key.empty() || rank.cache.key[0].shape() == driver.key[0].shape())) {
      return;
    }
    rank.cache = KVCacheTensors{};
    rank.cache.num_blocks = driver.num_blocks;
    rank.cache.block_size = driver.block_size;
    for (size_t i = 0; i < driver.key.size(); ++i) {
      rank.cache.key.push_back(Tensor::zeros(driver.key[i].shape(), driver.key[i].dtype(), rank.device));
      rank.cache.value.push_back(Tensor::zeros(driver.value[i].shape(), driver.value[i].dtype(), rank.device));
    }
    rank.cache_owner = owner;
  }

  // Views of rank r's buffers with the shapes and strides of rank 0's inputs (contents arrive by broadcast).
  ForwardBatch mirror_inputs(Rank& rank, const ForwardBatch& b) {
    auto mirror = [&](Field f, const Tensor& src) {
      if (!src.defined()) return Tensor();
      Tensor& buf = rank.inputs[f];
      const int64_t span = span_of(src);
      if (!buf.defined() || buf.numel() < span || buf.dtype() != src.dtype()) {
        buf = Tensor::empty({std::max<int64_t>(span, 2 * (buf.defined() ? buf.numel() : 0))}, src.dtype(), rank.device);
      }
      return Tensor::from_blob(buf.raw_data(), {std::max<int64_t>(span, 1)}, src.dtype(), nullptr, rank.device)
          .as_strided(src.shape(), src.strides());
    };
    ForwardBatch m;
    m.input_ids = mirror(kInputIds, b.input_ids);
    m.positions = mirror(kPositions, b.positions);
    m.logits_indices = mirror(kLogitsIndices, b.logits_indices);
    m.attention = b.attention;  // the host-side counts and hints
    m.attention.query_start_loc = mirror(kQueryStartLoc, b.attention.query_start_loc);
    m.attention.seq_lens = mirror(kSeqLens, b.attention.seq_lens);
    m.attention.block_table = mirror(kBlockTable, b.attention.block_table);
    m.attention.slot_mapping = mirror(kSlotMapping, b.attention.slot_mapping);
    m.attention.workspace = Tensor();
    if (b.attention.workspace.defined()) {
      if (!rank.workspace.defined() || rank.workspace.numel() != b.attention.workspace.numel()) {
        rank.workspace = Tensor::zeros(b.attention.workspace.shape(), b.attention.workspace.dtype(), rank.device);
      }
      m.attention.workspace = rank.workspace;
    }
    return m;
  }

  // Every rank, in the same order: rank 0's step inputs into every rank's copies.
  static void broadcast_inputs(Rank& rank, const ForwardBatch& b) {
    if (rank.comm->world_size() == 1) return;
    for (const Tensor* t : {&b.input_ids, &b.positions, &b.logits_indices, &b.attention.query_start_loc,
                            &b.attention.seq_lens, &b.attention.block_table, &b.attention.slot_mapping}) {
      if (!t->defined() || t->numel() == 0) continue;
      Tensor span = flat(*t);
      rank.comm->broadcast(span, 0);
    }
  }

  RankThreads threads_;
  std::unique_ptr<CpuCommunicatorGroup> cpu_group_;
  std::vector<Rank> ranks_;  // this node's ranks; ranks_[r] is global rank first_rank_ + r
  int first_rank_, total_ranks_;
  std::vector<const Arena*> bound_;  // arenas bound through ActivationMemory, innermost last
};

}  // namespace

Status check_parallel_config(const ParallelConfig& p, Device device) {
  if (p.tensor_parallel_size < 1) return invalid_argument("--tensor-parallel-size must be at least 1");
  RETURN_IF_ERROR(check_rendezvous_options(p.rendezvous));
  if (p.rendezvous.nnodes > 1) {
    if (device.is_cpu()) {
      return invalid_argument("--nnodes " + std::to_string(p.rendezvous.nnodes) +
                              ": several nodes run tensor parallelism over NCCL between CUDA devices; on the CPU the "
                              "ranks are threads of one process (--tensor-parallel-size alone)");
    }
    return invalid_argument("--nnodes " + std::to_string(p.rendezvous.nnodes) +
                            ": the NCCL id exchange over TCP is built, but the ranks of nodes other than 0 do not "
                            "step with node 0's scheduler yet; run tensor parallelism within one node");
  }
  return ok_status();
}

StatusOr<std::unique_ptr<CausalLM>> load_tensor_parallel_model(const std::string& model_dir,
                                                               const ModelLoadOptions& options,
                                                               const ParallelConfig& parallel,
                                                               const ModelConfig* config) {
  RETURN_IF_ERROR(check_parallel_config(parallel, options.device));
  ModelConfig loaded;
  if (config == nullptr) {
    ASSIGN_OR_RETURN(loaded, load_model_config(model_dir));
    config = &loaded;
  }
  RETURN_IF_ERROR(check_tensor_parallel_size(*config, parallel.tensor_parallel_size));
  const int world = static_cast<int>(parallel.tensor_parallel_size);
  auto model = std::make_unique<TensorParallelModel>(world, 0, world);
  RETURN_IF_ERROR(model->load(model_dir, options, config));
  return std::unique_ptr<CausalLM>(std::move(model));
}

StatusOr<std::unique_ptr<CausalLM>> load_parallel_model(const std::string& model_dir, const ModelLoadOptions& options,
                                                        const ParallelConfig& parallel, const ModelConfig* config) {
  RETURN_IF_ERROR(check_parallel_config(parallel, options.device));
  if (parallel.tensor_parallel_size == 1) return load_model(model_dir, options, config);
  return load_tensor_parallel_model(model_dir, options, parallel, config);
}

}  // namespace llmserve
