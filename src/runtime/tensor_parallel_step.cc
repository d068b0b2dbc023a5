// StepShapes and the fixed-size control header (see tensor_parallel_step.h).
#include "runtime/tensor_parallel_step.h"

#include "core/logging.h"

namespace llmserve {
namespace {

constexpr int64_t kMagic = 0x4c4c4d5450;  // "LLMTP": a header that is not one (a collective out of step) aborts

TensorShape shape_of(const Tensor& t) {
  TensorShape s;
  if (!t.defined()) return s;
  CHECK(t.dim() == 1 || t.dim() == 2) << "tensor-parallel step input " << t.to_string();
  s.defined = true;
  s.shape = t.shape();
  s.strides = t.strides();
  s.dtype = t.dtype();
  return s;
}

class Writer {
 public:
  explicit Writer(TpHeader& h) : h_(h) {}
  void put(int64_t v) {
    CHECK_LT(n_, h_.size()) << "tensor-parallel header overflow";
    h_[n_++] = v;
  }
  void put_shape(const Shape& s, size_t max_dims) {
    CHECK_LE(s.size(), max_dims);
    put(static_cast<int64_t>(s.size()));
    for (size_t i = 0; i < max_dims; ++i) put(i < s.size() ? s[i] : 0);
  }

 private:
  TpHeader& h_;
  size_t n_ = 0;
};

class Reader {
 public:
  explicit Reader(const TpHeader& h) : h_(h) {}
  int64_t get() {
    CHECK_LT(n_, h_.size()) << "tensor-parallel header overflow";
    return h_[n_++];
  }
  Shape get_shape(size_t max_dims) {
    const int64_t n = get();
    CHECK(n >= 0 && static_cast<size_t>(n) <= max_dims) << "tensor-parallel header: bad rank " << n;
    Shape s;
    for (size_t i = 0; i < max_dims; ++i) {
      const int64_t v = get();
      if (i < static_cast<size_t>(n)) s.push_back(v);
    }
    return s;
  }

 private:
  const TpHeader& h_;
  size_t n_ = 0;
};

}  // namespace

StepShapes step_shapes(const ForwardBatch& b, const KVCacheTensors& cache) {
  StepShapes s;
  s.inputs[kTpInputIds] = shape_of(b.input_ids);
  s.inputs[kTpPositions] = shape_of(b.positions);
  s.inputs[kTpLogitsIndices] = shape_of(b.logits_indices);
  s.inputs[kTpQueryStartLoc] = shape_of(b.attention.query_start_loc);
  s.inputs[kTpSeqLens] = shape_of(b.attention.seq_lens);
  s.inputs[kTpBlockTable] = shape_of(b.attention.block_table);
  s.inputs[kTpSlotMapping] = shape_of(b.attention.slot_mapping);
  s.num_reqs = b.attention.num_reqs;
  s.num_decode_tokens = b.attention.num_decode_tokens;
  s.max_query_len = b.attention.max_query_len;
  s.max_seq_len = b.attention.max_seq_len;
  s.workspace_numel = b.attention.workspace.defined() ? b.attention.workspace.numel() : 0;
  s.num_layers = static_cast<int64_t>(cache.key.size());
  if (!cache.key.empty()) {
    s.cache_shape = cache.key[0].shape();
    s.cache_dtype = cache.key[0].dtype();
  }
  return s;
}

TpHeader encode(const TpMessage& m) {
  TpHeader h{};
  Writer w(h);
  w.put(kMagic);
  w.put(static_cast<int64_t>(m.command));
  switch (m.command) {
    case TpCommand::kForward:
      for (const TensorShape& t : m.step.inputs) {
        w.put(t.defined);
        w.put(static_cast<int64_t>(t.dtype));
        w.put_shape(t.shape, 2);
        w.put_shape(t.strides, 2);
      }
      for (int64_t v : {m.step.num_reqs, m.step.num_decode_tokens, m.step.max_query_len, m.step.max_seq_len,
                        m.step.workspace_numel, m.step.num_layers, static_cast<int64_t>(m.step.cache_dtype)}) {
        w.put(v);
      }
      w.put_shape(m.step.cache_shape, 4);
      break;
    case TpCommand::kPlanActivations:
      w.put(m.limits.max_num_tokens);
      w.put(m.limits.max_num_logits);
      break;
    case TpCommand::kReleaseActivations:
      w.put(m.release_caches);
      break;
    case TpCommand::kShutdown:
      break;
  }
  return h;
}

TpMessage decode(const TpHeader& h) {
  Reader r(h);
  CHECK_EQ(r.get(), kMagic) << "tensor-parallel control header expected: the ranks are out of step";
  TpMessage m;
  m.command = static_cast<TpCommand>(r.get());
  switch (m.command) {
    case TpCommand::kForward:
      for (TensorShape& t : m.step.inputs) {
        t.defined = r.get() != 0;
        t.dtype = static_cast<DType>(r.get());
        t.shape = r.get_shape(2);
        t.strides = r.get_shape(2);
      }
      m.step.num_reqs = r.get();
      m.step.num_decode_tokens = r.get();
      m.step.max_query_len = r.get();
      m.step.max_seq_len = r.get();
      m.step.workspace_numel = r.get();
      m.step.num_layers = r.get();
      m.step.cache_dtype = static_cast<DType>(r.get());
      m.step.cache_shape = r.get_shape(4);
      break;
    case TpCommand::kPlanActivations:
      m.limits.max_num_tokens = r.get();
      m.limits.max_num_logits = r.get();
      break;
    case TpCommand::kReleaseActivations:
      m.release_caches = r.get() != 0;
      break;
    case TpCommand::kShutdown:
      break;
    default:
      LOG(FATAL) << "tensor-parallel control header: unknown command " << static_cast<int64_t>(m.command);
  }
  return m;
}

}  // namespace llmserve
