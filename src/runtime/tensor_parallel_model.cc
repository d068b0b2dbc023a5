// TensorParallelModel: rank threads, the per-step input broadcast, per-rank KV caches and activation arenas.
#include "runtime/tensor_parallel_model.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda_event.h"
#include "core/logging.h"
#include "model/tensor_parallel.h"
#include "runtime/cpu_communicator.h"
#include "runtime/nccl_communicator.h"
#include "runtime/tensor_parallel_step.h"

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

// The node's ranks need devices base.index .. base.index + local_ranks - 1.
Status check_cuda_devices(Device base, int local_ranks, int total_ranks) {
#ifdef LLMSERVE_WITH_CUDA
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
  if (base.index + local_ranks > count) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(total_ranks) + " on " + base.to_string() +
                            " needs " + std::to_string(local_ranks) + " CUDA device(s) from cuda:" +
                            std::to_string(base.index) + " on this node; " + std::to_string(count) + " present");
  }
  return ok_status();
#else
  (void)local_ranks, (void)total_ranks;
  return invalid_argument("--device " + base.to_string() + ": this build has no CUDA support");
#endif
}

Tensor flat(const Tensor& t) { return Tensor::from_blob(t.raw_data(), {span_of(t)}, t.dtype(), nullptr, t.device()); }

// The ranks of this process. Node 0's model is the runner's CausalLM; on other nodes the same class is driven by
// serve_tensor_parallel_ranks from rank 0's control messages (spans_nodes_).
class TensorParallelModel final : public CausalLM {
 public:
  TensorParallelModel(int local_ranks, int first_rank, int total_ranks, bool spans_nodes)
      : threads_(local_ranks),
        ranks_(static_cast<size_t>(local_ranks)),
        first_rank_(first_rank),
        total_ranks_(total_ranks),
        spans_nodes_(spans_nodes) {}

  ~TensorParallelModel() override {
    // Node 0 tells the other nodes' ranks to stop; then each rank's memory is released on its own thread.
    if (spans_nodes_ && first_rank_ == 0 && loaded_) {
      TpMessage stop;
      stop.command = TpCommand::kShutdown;
      threads_.run([&](int r) {
        use_device(ranks_[r].device);
        (void)exchange(ranks_[r], &stop, /*receive=*/false);
      });
    }
    threads_.run([this](int r) {
      // A rank that got nothing (a load refused before it started: no such device) has no device to select.
      if (ranks_[r].model || ranks_[r].nccl) use_device(ranks_[r].device);
      ranks_[r] = Rank{};
    });
  }

  // Devices: options.device.index + local rank. Communicators: `comms` (one per local rank) when given, else made
  // here — the CPU group in process, or NCCL joined with `nccl_id` (made here when empty: one node).
  Status load(const std::string& model_dir, const ModelLoadOptions& options, const ModelConfig* config,
              const std::vector<Communicator*>& comms, const std::string& nccl_id) {
    const int world = static_cast<int>(ranks_.size());
    for (int r = 0; r < world; ++r) {
      ranks_[r].device = options.device.is_cpu() ? Device::cpu() : Device::cuda(options.device.index + r);
    }
    if (!comms.empty()) {
      CHECK_EQ(static_cast<int>(comms.size()), world);
      for (int r = 0; r < world; ++r) ranks_[r].comm = comms[r];
    } else if (options.device.is_cpu()) {
      cpu_group_ = std::make_unique<CpuCommunicatorGroup>(world);
      for (int r = 0; r < world; ++r) ranks_[r].comm = &cpu_group_->rank(r);
    } else {
      RETURN_IF_ERROR(check_cuda_devices(options.device, world, total_ranks_));
      RETURN_IF_ERROR(join_nccl(nccl_id));
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
    loaded_ = true;
    return ok_status();
  }

  const ModelConfig& config() const override { return ranks_[0].model->config(); }
  Device device() const override { return ranks_[0].device; }
  DType activation_dtype() const override { return ranks_[0].model->activation_dtype(); }
  int64_t num_kv_heads_per_rank() const override { return ranks_[0].model->num_kv_heads_per_rank(); }
  KVCacheSpec kv_cache_spec() const override { return ranks_[0].model->kv_cache_spec(); }
  int64_t attention_workspace_elems(int64_t max_num_tokens, int64_t max_model_len) const override {
    return ranks_[0].model->attention_workspace_elems(max_num_tokens, max_model_len);
  }
  std::vector<Device> devices() const override {
    std::vector<Device> out;
    for (const Rank& r : ranks_) out.push_back(r.device);
    return out;
  }
  // Several devices' streams cannot be captured from rank 0's thread: graphs only for one rank.
  bool cuda_graph_capturable() const override { return ranks_.size() == 1 && !spans_nodes_; }

  void forward(const ForwardBatch& batch, KVCacheTensors& kv_cache, Tensor& logits) override {
    CHECK_EQ(first_rank_, 0) << "forward on a node other than 0 (its ranks follow node 0: serve)";
    TpMessage message;
    message.command = TpCommand::kForward;
    if (spans_nodes_) message.step = step_shapes(batch, kv_cache);
    threads_.run([&](int r) {
      Rank& rank = ranks_[r];
      use_device(rank.device);
      if (spans_nodes_) (void)exchange(rank, &message, /*receive=*/false);
      if (r == 0) {
        broadcast_inputs(rank, batch);
        rank.model->forward(batch, kv_cache, logits);
        return;
      }
      step_as_follower(rank, step_shapes(batch, kv_cache), kv_cache.key.empty() ? nullptr : kv_cache.key[0].raw_data());
    });
  }

  // Rank 0 plans into the caller's planner (the runner's arena on rank 0's device); every other rank gets an arena
  // of the same plan on its own device, released when the caller's is (bind_activations back to the previous one).
  void plan_activations(const ActivationLimits& limits, ArenaPlanner& planner) override {
    ranks_[0].model->plan_activations(limits, planner);
    TpMessage message;
    message.command = TpCommand::kPlanActivations;
    message.limits = limits;
    threads_.run([&](int r) {
      use_device(ranks_[r].device);
      if (spans_nodes_) (void)exchange(ranks_[r], &message, /*receive=*/false);
      if (r != 0) push_arena(ranks_[r], limits);
    });
  }

  void bind_activations(const Arena* arena) override {
    ranks_[0].model->bind_activations(arena);
    const Arena* previous = bound_.size() >= 2 ? bound_[bound_.size() - 2] : nullptr;
    if (!bound_.empty() && arena == previous) {  // an ActivationMemory being destroyed: drop the ranks' arenas too
      bound_.pop_back();
      TpMessage message;
      message.command = TpCommand::kReleaseActivations;
      // The outermost one gone (its runner destroyed): the ranks' caches go too, so memory measured next (the real
      // runner's plan after the profiling one) is not held by a dead runner's cache.
      message.release_caches = bound_.empty();
      threads_.run([&](int r) {
        use_device(ranks_[r].device);
        if (spans_nodes_) (void)exchange(ranks_[r], &message, /*receive=*/false);
        if (r != 0) pop_arena(ranks_[r], message.release_caches);
      });
    } else {
      bound_.push_back(arena);
    }
  }
  const Arena* bound_activations() const override { return ranks_[0].model->bound_activations(); }

  bool follows_node0() const { return spans_nodes_ && first_rank_ > 0; }

  // A node other than 0: every local rank follows rank 0's control messages until the shutdown.
  void serve() {
    CHECK(spans_nodes_ && first_rank_ > 0) << "serve() is for the ranks of nodes other than 0";
    threads_.run([&](int r) {
      Rank& rank = ranks_[r];
      use_device(rank.device);
      for (;;) {
        const TpMessage m = exchange(rank, nullptr);
        switch (m.command) {
          case TpCommand::kForward:
            step_as_follower(rank, m.step, nullptr);
            break;
          case TpCommand::kPlanActivations:
            push_arena(rank, m.limits);
            break;
          case TpCommand::kReleaseActivations:
            pop_arena(rank, m.release_caches);
            break;
          case TpCommand::kShutdown:
            return;
        }
      }
    });
  }

 private:
  struct Rank {
    std::unique_ptr<CausalLM> model;
    Device device;
    Communicator* comm = nullptr;
    std::unique_ptr<NcclCommunicator> nccl;
    KVCacheTensors cache;               // every rank but node 0's rank 0: this rank's heads, the runner's shape
    const void* cache_owner = nullptr;  // node 0: rank 0's key[0] the cache was made for (a new runner: a new cache)
    Tensor inputs[kTpNumInputs];        // copies of rank 0's step inputs, grown on demand
    Tensor workspace;                   // CUDA split-K scratch (zeroed once)
    std::vector<std::unique_ptr<ActivationMemory>> arenas;
    // Control messages (spans_nodes_): the header on this rank's device, its page-locked host side, and the event
    // after node 0's upload (the host side is rewritten only once the copy has read it).
    Tensor header_device, header_host;
    Event header_uploaded;
  };

  // One step on a rank that does not drive the runner: its cache and input copies shaped as rank 0's, the inputs
  // broadcast from rank 0, the forward without logits. `owner`: node 0's cache identity (null on other nodes).
  void step_as_follower(Rank& rank, const StepShapes& step, const void* owner) {
    ensure_cache(rank, step, owner);
    ForwardBatch mine = mirror_inputs(rank, step);
    broadcast_inputs(rank, mine);
    Tensor no_logits;
    rank.model->forward(mine, rank.cache, no_logits);
  }

  void push_arena(Rank& rank, const ActivationLimits& limits) {
    use_device(rank.device);
    rank.arenas.push_back(std::make_unique<ActivationMemory>(*rank.model, limits));
  }

  void pop_arena(Rank& rank, bool release_caches) {
    use_device(rank.device);
    if (!rank.arenas.empty()) rank.arenas.pop_back();
    if (release_caches) {
      rank.cache = KVCacheTensors{};
      rank.cache_owner = nullptr;
    }
  }

  // Every local rank, in the same order (its device current): global rank 0 sends *message, every other rank takes
  // part in the broadcast and, with `receive`, returns the message (node 0's other ranks need not: they share rank 0's
  // memory). On CUDA the header goes host -> rank 0's device -> NCCL broadcast -> each rank's device -> host (a
  // receiver waits for it: it needs the shapes on the host to launch the step).
  TpMessage exchange(Rank& rank, const TpMessage* message, bool receive = true) {
    if (!rank.header_device.defined()) {
      rank.header_device = Tensor::zeros({static_cast<int64_t>(kTpHeaderWords)}, DType::kI64, rank.device);
      rank.header_host = rank.device.is_cpu()
                             ? Tensor::empty({static_cast<int64_t>(kTpHeaderWords)}, DType::kI64)
                             : Tensor::empty_pinned({static_cast<int64_t>(kTpHeaderWords)}, DType::kI64);
      rank.header_uploaded = Event(rank.device);
    }
    const bool sender = rank.comm->rank() == 0;
    CHECK(!sender || message != nullptr) << "rank 0 sends the control messages";
    if (sender) {
      rank.header_uploaded.synchronize();  // the previous header's copy has read the host side
      const TpHeader h = encode(*message);
      std::copy(h.begin(), h.end(), rank.header_host.data<int64_t>());
      rank.header_device.copy_from(rank.header_host);
      rank.header_uploaded.record();
    }
    rank.comm->broadcast(rank.header_device, 0);
    if (sender || !receive) return message != nullptr ? *message : TpMessage{};
    const Tensor host = rank.device.is_cpu() ? rank.header_device : rank.header_device.to(Device::cpu());
    TpHeader h;
    std::copy(host.data<int64_t>(), host.data<int64_t>() + kTpHeaderWords, h.begin());
    return decode(h);
  }

  // NCCL: one communicator per rank thread, all joining concurrently (ncclCommInitRank blocks until every rank of
  // the world joined). One node makes the id here; several nodes got it from node 0 (tcp_rendezvous.h).
  Status join_nccl(std::string id) {
    if (!nccl_available()) return failed_precondition("tensor parallelism on CUDA needs NCCL; this build has none");
    if (id.empty()) {
      ASSIGN_OR_RETURN(id, new_nccl_unique_id());
    }
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

  // The rank's KV cache in the runner's per-layer shape (this rank holds as many heads as rank 0), made once per
  // runner: anew when node 0's cache identity or the shape changes.
  void ensure_cache(Rank& rank, const StepShapes& step, const void* owner) {
    if (rank.cache_owner == owner && static_cast<int64_t>(rank.cache.key.size()) == step.num_layers &&
        (rank.cache.key.empty() || rank.cache.key[0].shape() == step.cache_shape)) {
      return;
    }
    rank.cache = KVCacheTensors{};
    if (step.num_layers > 0) {
      rank.cache.num_blocks = step.cache_shape[0];
      rank.cache.block_size = step.cache_shape[1];
    }
    for (int64_t i = 0; i < step.num_layers; ++i) {
      rank.cache.key.push_back(Tensor::zeros(step.cache_shape, step.cache_dtype, rank.device));
      if (rank.model->kv_cache_spec().has_value) {
        rank.cache.value.push_back(Tensor::zeros(step.cache_shape, step.cache_dtype, rank.device));
      }
    }
    rank.cache_owner = owner;
  }

  // Views of the rank's buffers with the shapes and strides of rank 0's inputs (contents arrive by broadcast).
  ForwardBatch mirror_inputs(Rank& rank, const StepShapes& step) {
    auto mirror = [&](TensorParallelInput f) {
      const TensorShape& src = step.inputs[f];
      if (!src.defined) return Tensor();
      Tensor& buf = rank.inputs[f];
      int64_t span = 1;
      for (size_t d = 0; d < src.shape.size(); ++d) span += (src.shape[d] - 1) * src.strides[d];
      for (int64_t n : src.shape) span = n == 0 ? 0 : span;
      if (!buf.defined() || buf.numel() < span || buf.dtype() != src.dtype) {
        buf = Tensor::empty({std::max<int64_t>(span, 2 * (buf.defined() ? buf.numel() : 0))}, src.dtype, rank.device);
      }
      return Tensor::from_blob(buf.raw_data(), {std::max<int64_t>(span, 1)}, src.dtype, nullptr, rank.device)
          .as_strided(src.shape, src.strides);
    };
    ForwardBatch m;
    m.input_ids = mirror(kTpInputIds);
    m.positions = mirror(kTpPositions);
    m.logits_indices = mirror(kTpLogitsIndices);
    m.attention.query_start_loc = mirror(kTpQueryStartLoc);
    m.attention.seq_lens = mirror(kTpSeqLens);
    m.attention.block_table = mirror(kTpBlockTable);
    m.attention.slot_mapping = mirror(kTpSlotMapping);
    m.attention.num_reqs = step.num_reqs;
    m.attention.num_decode_tokens = step.num_decode_tokens;
    m.attention.max_query_len = step.max_query_len;
    m.attention.max_seq_len = step.max_seq_len;
    if (step.workspace_numel > 0) {
      if (!rank.workspace.defined() || rank.workspace.numel() != step.workspace_numel) {
        rank.workspace = Tensor::zeros({step.workspace_numel}, DType::kF32, rank.device);
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
  bool spans_nodes_;  // other processes hold ranks too: they follow rank 0's control messages
  bool loaded_ = false;
  std::vector<const Arena*> bound_;  // arenas bound through ActivationMemory, innermost last
};

}  // namespace

Status check_parallel_config(const ParallelConfig& p, Device device) {
  if (p.tensor_parallel_size < 1) return invalid_argument("--tensor-parallel-size must be at least 1");
  RETURN_IF_ERROR(check_rendezvous_options(p.rendezvous));
  const int64_t nnodes = p.rendezvous.nnodes;
  if (nnodes > 1 && device.is_cpu()) {
    return invalid_argument("--nnodes " + std::to_string(nnodes) +
                            ": several nodes run tensor parallelism over NCCL between CUDA devices; on the CPU the "
                            "ranks are threads of one process (--tensor-parallel-size alone)");
  }
  if (p.tensor_parallel_size % nnodes != 0) {
    return invalid_argument("--tensor-parallel-size " + std::to_string(p.tensor_parallel_size) +
                            " must be divisible by --nnodes " + std::to_string(nnodes) +
                            " (each node holds the same number of ranks)");
  }
  return ok_status();
}

StatusOr<std::unique_ptr<CausalLM>> load_tensor_parallel_ranks(const std::string& model_dir,
                                                               const ModelLoadOptions& options,
                                                               const ModelConfig& config,
                                                               const std::vector<Communicator*>& comms, int first_rank,
                                                               int total_ranks, bool spans_nodes) {
  RETURN_IF_ERROR(check_tensor_parallel_size(config, total_ranks));
  CHECK(!comms.empty());
  auto model =
      std::make_unique<TensorParallelModel>(static_cast<int>(comms.size()), first_rank, total_ranks, spans_nodes);
  RETURN_IF_ERROR(model->load(model_dir, options, &config, comms, ""));
  return std::unique_ptr<CausalLM>(std::move(model));
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
  const RendezvousOptions& rdv = parallel.rendezvous;
  const int total = static_cast<int>(parallel.tensor_parallel_size);
  const int local = static_cast<int>(total / rdv.nnodes), first = static_cast<int>(rdv.node_rank) * local;
  std::string nccl_id;
  if (rdv.nnodes > 1) {  // CUDA (check_parallel_config): node 0 makes the NCCL id and hands it to the others
    if (!nccl_available()) return failed_precondition("--nnodes needs NCCL; this build has none");
    RETURN_IF_ERROR(check_cuda_devices(options.device, local, total));  // before waiting on the other nodes
    LOG(INFO) << "tensor parallel: node " << rdv.node_rank << " of " << rdv.nnodes << " (ranks " << first << ".."
              << first + local - 1 << "): "
              << (rdv.node_rank == 0 ? "waiting for the other nodes on port " + std::to_string(rdv.master_port)
                                     : "joining node 0 at " + rdv.master_addr + ":" + std::to_string(rdv.master_port))
              << " (timeout " << rdv.timeout_s << " s)";
    std::string mine;
    if (rdv.node_rank == 0) {
      ASSIGN_OR_RETURN(mine, new_nccl_unique_id());
    }
    ASSIGN_OR_RETURN(nccl_id, exchange_blob(rdv, mine));
  }
  auto model = std::make_unique<TensorParallelModel>(local, first, total, rdv.nnodes > 1);
  RETURN_IF_ERROR(model->load(model_dir, options, config, {}, nccl_id));
  return std::unique_ptr<CausalLM>(std::move(model));
}

StatusOr<std::unique_ptr<CausalLM>> load_parallel_model(const std::string& model_dir, const ModelLoadOptions& options,
                                                        const ParallelConfig& parallel, const ModelConfig* config) {
  RETURN_IF_ERROR(check_parallel_config(parallel, options.device));
  if (parallel.tensor_parallel_size == 1) return load_model(model_dir, options, config);
  return load_tensor_parallel_model(model_dir, options, parallel, config);
}

Status serve_tensor_parallel_ranks(CausalLM& model) {
  auto* tp = dynamic_cast<TensorParallelModel*>(&model);
  if (tp == nullptr || !tp->follows_node0()) {
    return failed_precondition("serve_tensor_parallel_ranks: not the ranks of a node other than 0");
  }
  tp->serve();
  return ok_status();
}

}  // namespace llmserve
