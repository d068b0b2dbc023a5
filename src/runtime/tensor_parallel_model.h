// Tensor parallelism as one CausalLM: N rank models (each holding its shard — split heads, split MLP, split
// vocabulary — and its own KV cache of num_kv_heads / N heads) driven by one scheduler and one ModelRunner. Rank 0
// runs on the caller's thread and owns the runner's buffers; the node's other ranks are threads of this process, one
// per device, that receive each step's inputs by a broadcast from rank 0 and take part in every collective; ranks on
// other nodes follow rank 0's control messages (tensor_parallel_step.h). Only rank 0 keeps the gathered logits (the
// sampler runs once). Collectives: the in-process CPU group on the CPU, NCCL on CUDA. See docs/tensor-parallel.md
// for why threads, not processes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/causal_lm.h"
#include "model/model_registry.h"
#include "runtime/tcp_rendezvous.h"

namespace llmserve {

struct ParallelConfig {
  int64_t tensor_parallel_size = 1;  // ranks in all (over every node); vLLM's --tensor-parallel-size / -tp
  RendezvousOptions rendezvous;      // --nnodes, --node-rank, --master-addr, --master-port
};

// InvalidArgument naming the flag: tensor_parallel_size < 1, bad rendezvous options, and --nnodes > 1 (multi-node
// runs need NCCL over CUDA devices: on the CPU it is refused; with CUDA the NCCL id exchange is built, the ranks of
// other nodes stepping with node 0 are not yet, so it is refused there too, naming what is missing).
Status check_parallel_config(const ParallelConfig& parallel, Device device);

// Loads `model_dir` (or `config` with dummy weights, as load_model) sharded over parallel.tensor_parallel_size ranks:
// a plain model when it is 1, else a tensor-parallel one. CPU: ranks are threads sharing memory. CUDA: local rank r on
// device options.device.index + r (each must exist), NCCL between them. Several nodes (--nnodes): node k holds
// ranks [k N / nnodes, (k + 1) N / nnodes); node 0 makes the NCCL id and hands it over TCP (exchange_blob). Node 0's
// model drives the engine; every other node's must be handed to serve_tensor_parallel_ranks. Divisibility errors are
// vLLM's messages (check_tensor_parallel_size); every rank reads only its slices of the weights.
StatusOr<std::unique_ptr<CausalLM>> load_parallel_model(const std::string& model_dir, const ModelLoadOptions& options,
                                                        const ParallelConfig& parallel,
                                                        const ModelConfig* config = nullptr);

// As load_parallel_model, but always the tensor-parallel wrapper, even for one rank (tests: the wrapper's input
// broadcast, caches and collectives at world size 1 — on CUDA the single-GPU NCCL path).
StatusOr<std::unique_ptr<CausalLM>> load_tensor_parallel_model(const std::string& model_dir,
                                                               const ModelLoadOptions& options,
                                                               const ParallelConfig& parallel,
                                                               const ModelConfig* config = nullptr);

// This process's ranks [first_rank, first_rank + comms.size()) of `total_ranks`, over the given communicators (one per
// local rank; they outlive the model). spans_nodes: other ranks live elsewhere and follow rank 0's control messages
// (tests run "nodes" as threads over one CPU group).
StatusOr<std::unique_ptr<CausalLM>> load_tensor_parallel_ranks(const std::string& model_dir,
                                                               const ModelLoadOptions& options,
                                                               const ModelConfig& config,
                                                               const std::vector<Communicator*>& comms, int first_rank,
                                                               int total_ranks, bool spans_nodes);

// A node other than 0: runs its ranks' share of every step node 0's model takes (and of its activation plans) until
// node 0's model is destroyed. FailedPrecondition for any other model.
Status serve_tensor_parallel_ranks(CausalLM& model);

}  // namespace llmserve
