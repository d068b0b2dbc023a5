// Codec: hand-written msgpack packing / checked unpacking. msgpack exceptions stop here (caught in decode_*),
// and the unpack limits are tied to the message size so a forged length cannot make the decoder allocate
// more than a small multiple of the bytes it was given.
#include "ipc/codec.h"

#include <msgpack.hpp>
#include <stdexcept>

namespace llmserve {
namespace {

enum MessageType : int32_t {
  kAddRequest = 1,
  kAbort = 2,
  kFinishStopped = 3,
  kShutdown = 4,
  kReady = 11,
  kFailure = 12,
  kOutputs = 13,
};

using Packer = msgpack::packer<msgpack::sbuffer>;

// ---- packing ----

template <typename T>
void pack_optional(Packer &pk, const std::optional<T> &v) {
  if (v) {
    pk.pack(*v);
  } else {
    pk.pack_nil();
  }
}

void pack_params(Packer &pk, const SamplingParams &p) {
  pk.pack_array(20);
  pk.pack(p.n);
  pk.pack(p.temperature);
  pk.pack(p.top_p);
  pk.pack(p.top_k);
  pk.pack(p.min_p);
  pack_optional(pk, p.seed);
  pack_optional(pk, p.max_tokens);
  pk.pack(p.min_tokens);
  pk.pack(p.stop);
  pk.pack(p.stop_token_ids);
  pk.pack(p.ignore_eos);
  pk.pack(p.include_stop_str_in_output);
  pk.pack(p.presence_penalty);
  pk.pack(p.frequency_penalty);
  pk.pack(p.repetition_penalty);
  pk.pack_array(static_cast<uint32_t>(p.logit_bias.size()));
  for (const auto &[id, bias] : p.logit_bias) {
    pk.pack_array(2);
    pk.pack(id);
    pk.pack(bias);
  }
  pack_optional(pk, p.logprobs);
  pack_optional(pk, p.prompt_logprobs);
  pk.pack(p.skip_special_tokens);
  pk.pack(p.spaces_between_special_tokens);
}

void pack_request(Packer &pk, const EngineCoreRequest &r) {
  pk.pack_array(7);
  pk.pack(r.request_id);
  pk.pack(r.prompt_token_ids);
  pack_params(pk, r.sampling_params);
  pk.pack(r.arrival_time);
  pk.pack(r.priority);
  pack_optional(pk, r.eos_token_id);
  pk.pack(r.cache_salt);
}

void pack_logprobs(Packer &pk, const std::vector<TokenLogprobs> &v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const TokenLogprobs &t : v) {
    pk.pack_array(3);
    pk.pack(t.token_ids);
    pk.pack(t.logprobs);
    pk.pack(t.sampled_token_rank);
  }
}

void pack_stop_reason(Packer &pk, const StopReason &s) {
  if (const auto *id = std::get_if<int32_t>(&s)) {
    pk.pack(*id);
  } else if (const auto *str = std::get_if<std::string>(&s)) {
    pk.pack(*str);
  } else {
    pk.pack_nil();
  }
}

void pack_output(Packer &pk, const EngineCoreOutput &o) {
  pk.pack_array(8);
  pk.pack(o.request_id.str());
  pk.pack(o.new_token_ids);
  pack_logprobs(pk, o.new_logprobs);
  pack_logprobs(pk, o.new_prompt_logprobs);
  if (o.finish_reason) {
    pk.pack(static_cast<int32_t>(*o.finish_reason));
  } else {
    pk.pack_nil();
  }
  pack_stop_reason(pk, o.stop_reason);
  pk.pack(o.num_cached_tokens);
  pk.pack_array(static_cast<uint32_t>(o.events.size()));
  for (const EngineCoreEvent &e : o.events) {
    pk.pack_array(2);
    pk.pack(static_cast<int32_t>(e.type));
    pk.pack(e.timestamp);
  }
}

void pack_outputs(Packer &pk, const EngineCoreOutputs &outs) {
  pk.pack_array(3);
  pk.pack_array(static_cast<uint32_t>(outs.outputs.size()));
  for (const EngineCoreOutput &o : outs.outputs) pack_output(pk, o);
  const SchedulerStats &s = outs.scheduler_stats;
  pk.pack_array(7);
  pk.pack(s.num_running_reqs);
  pk.pack(s.num_waiting_reqs);
  pk.pack(s.kv_cache_usage);
  pk.pack(s.prefix_cache_requests);
  pk.pack(s.prefix_cache_queries);
  pk.pack(s.prefix_cache_hits);
  pk.pack(s.num_preemptions);
  pk.pack(outs.timestamp);
}

// ---- unpacking (throws DecodeError / msgpack exceptions, caught in decode_*) ----

struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The elements of `o`, which must be an array of exactly `n` (or, with n < 0, any number of) elements.
const msgpack::object *array_of(const msgpack::object &o, int64_t n, const char *what, uint32_t *size = nullptr) {
  if (o.type != msgpack::type::ARRAY) throw DecodeError(std::string(what) + ": expected an array");
  if (n >= 0 && o.via.array.size != static_cast<uint32_t>(n)) {
    throw DecodeError(std::string(what) + ": expected " + std::to_string(n) + " fields, got " +
                      std::to_string(o.via.array.size));
  }
  if (size != nullptr) *size = o.via.array.size;
  return o.via.array.ptr;
}

template <typename T>
T get(const msgpack::object &o, const char *what) {
  try {
    return o.as<T>();
  } catch (const std::exception &) {
    throw DecodeError(std::string(what) + ": wrong type or out of range");
  }
}

template <typename T>
std::optional<T> get_optional(const msgpack::object &o, const char *what) {
  if (o.is_nil()) return std::nullopt;
  return get<T>(o, what);
}

template <typename T>
std::vector<T> get_vector(const msgpack::object &o, const char *what) {
  uint32_t n = 0;
  const msgpack::object *items = array_of(o, -1, what, &n);
  std::vector<T> v;
  v.reserve(n);
  for (uint32_t i = 0; i < n; ++i) v.push_back(get<T>(items[i], what));
  return v;
}

SamplingParams unpack_params(const msgpack::object &o) {
  const msgpack::object *f = array_of(o, 20, "sampling_params");
  SamplingParams p;
  p.n = get<int32_t>(f[0], "sampling_params.n");
  p.temperature = get<double>(f[1], "sampling_params.temperature");
  p.top_p = get<double>(f[2], "sampling_params.top_p");
  p.top_k = get<int32_t>(f[3], "sampling_params.top_k");
  p.min_p = get<double>(f[4], "sampling_params.min_p");
  p.seed = get_optional<int64_t>(f[5], "sampling_params.seed");
  p.max_tokens = get_optional<int64_t>(f[6], "sampling_params.max_tokens");
  p.min_tokens = get<int64_t>(f[7], "sampling_params.min_tokens");
  p.stop = get_vector<std::string>(f[8], "sampling_params.stop");
  p.stop_token_ids = get_vector<int32_t>(f[9], "sampling_params.stop_token_ids");
  p.ignore_eos = get<bool>(f[10], "sampling_params.ignore_eos");
  p.include_stop_str_in_output = get<bool>(f[11], "sampling_params.include_stop_str_in_output");
  p.presence_penalty = get<double>(f[12], "sampling_params.presence_penalty");
  p.frequency_penalty = get<double>(f[13], "sampling_params.frequency_penalty");
  p.repetition_penalty = get<double>(f[14], "sampling_params.repetition_penalty");
  uint32_t n = 0;
  const msgpack::object *bias = array_of(f[15], -1, "sampling_params.logit_bias", &n);
  for (uint32_t i = 0; i < n; ++i) {
    const msgpack::object *kv = array_of(bias[i], 2, "sampling_params.logit_bias");
    p.logit_bias.emplace_back(get<int32_t>(kv[0], "sampling_params.logit_bias"),
                              get<double>(kv[1], "sampling_params.logit_bias"));
  }
  p.logprobs = get_optional<int32_t>(f[16], "sampling_params.logprobs");
  p.prompt_logprobs = get_optional<int32_t>(f[17], "sampling_params.prompt_logprobs");
  p.skip_special_tokens = get<bool>(f[18], "sampling_params.skip_special_tokens");
  p.spaces_between_special_tokens = get<bool>(f[19], "sampling_params.spaces_between_special_tokens");
  return p;
}

EngineCoreRequest unpack_request(const msgpack::object &o) {
  const msgpack::object *f = array_of(o, 7, "request");
  EngineCoreRequest r;
  r.request_id = get<std::string>(f[0], "request.request_id");
  r.prompt_token_ids = get_vector<int32_t>(f[1], "request.prompt_token_ids");
  r.sampling_params = unpack_params(f[2]);
  r.arrival_time = get<double>(f[3], "request.arrival_time");
  r.priority = get<int32_t>(f[4], "request.priority");
  r.eos_token_id = get_optional<int32_t>(f[5], "request.eos_token_id");
  r.cache_salt = get<uint64_t>(f[6], "request.cache_salt");
  return r;
}

std::vector<TokenLogprobs> unpack_logprobs(const msgpack::object &o, const char *what) {
  uint32_t n = 0;
  const msgpack::object *items = array_of(o, -1, what, &n);
  std::vector<TokenLogprobs> v(n);
  for (uint32_t i = 0; i < n; ++i) {
    const msgpack::object *f = array_of(items[i], 3, what);
    v[i].token_ids = get_vector<int32_t>(f[0], what);
    v[i].logprobs = get_vector<float>(f[1], what);
    v[i].sampled_token_rank = get<int32_t>(f[2], what);
  }
  return v;
}

EngineCoreOutput unpack_output(const msgpack::object &o) {
  const msgpack::object *f = array_of(o, 8, "output");
  EngineCoreOutput out;
  out.request_id = get<std::string>(f[0], "output.request_id");
  out.new_token_ids = get_vector<int32_t>(f[1], "output.new_token_ids");
  out.new_logprobs = unpack_logprobs(f[2], "output.new_logprobs");
  out.new_prompt_logprobs = unpack_logprobs(f[3], "output.new_prompt_logprobs");
  if (!f[4].is_nil()) {
    const int32_t r = get<int32_t>(f[4], "output.finish_reason");
    if (r < static_cast<int32_t>(FinishReason::kStop) || r > static_cast<int32_t>(FinishReason::kAbort)) {
      throw DecodeError("output.finish_reason: " + std::to_string(r) + " is not a finish reason");
    }
    out.finish_reason = static_cast<FinishReason>(r);
  }
  if (f[5].type == msgpack::type::STR) {
    out.stop_reason = get<std::string>(f[5], "output.stop_reason");
  } else if (!f[5].is_nil()) {
    out.stop_reason = get<int32_t>(f[5], "output.stop_reason");
  }
  out.num_cached_tokens = get<int64_t>(f[6], "output.num_cached_tokens");
  uint32_t n = 0;
  const msgpack::object *events = array_of(f[7], -1, "output.events", &n);
  for (uint32_t i = 0; i < n; ++i) {
    const msgpack::object *e = array_of(events[i], 2, "output.events");
    const int32_t type = get<int32_t>(e[0], "output.events.type");
    if (type < static_cast<int32_t>(EngineCoreEventType::kQueued) ||
        type > static_cast<int32_t>(EngineCoreEventType::kPreempted)) {
      throw DecodeError("output.events.type: " + std::to_string(type) + " is not an event type");
    }
    out.events.push_back({static_cast<EngineCoreEventType>(type), get<double>(e[1], "output.events.timestamp")});
  }
  return out;
}

EngineCoreOutputs unpack_outputs(const msgpack::object &o) {
  const msgpack::object *f = array_of(o, 3, "outputs");
  EngineCoreOutputs outs;
  uint32_t n = 0;
  const msgpack::object *items = array_of(f[0], -1, "outputs.outputs", &n);
  outs.outputs.reserve(n);
  for (uint32_t i = 0; i < n; ++i) outs.outputs.push_back(unpack_output(items[i]));
  const msgpack::object *s = array_of(f[1], 7, "outputs.scheduler_stats");
  SchedulerStats &st = outs.scheduler_stats;
  st.num_running_reqs = get<int64_t>(s[0], "scheduler_stats.num_running_reqs");
  st.num_waiting_reqs = get<int64_t>(s[1], "scheduler_stats.num_waiting_reqs");
  st.kv_cache_usage = get<double>(s[2], "scheduler_stats.kv_cache_usage");
  st.prefix_cache_requests = get<int64_t>(s[3], "scheduler_stats.prefix_cache_requests");
  st.prefix_cache_queries = get<int64_t>(s[4], "scheduler_stats.prefix_cache_queries");
  st.prefix_cache_hits = get<int64_t>(s[5], "scheduler_stats.prefix_cache_hits");
  st.num_preemptions = get<int64_t>(s[6], "scheduler_stats.num_preemptions");
  outs.timestamp = get<double>(f[2], "outputs.timestamp");
  return outs;
}

std::string finish(const msgpack::sbuffer &buf) { return std::string(buf.data(), buf.size()); }

// Unpacks `bytes` into one top-level [type, payload] array; `handle` keeps the objects alive.
const msgpack::object *unpack_envelope(std::string_view bytes, msgpack::object_handle *handle, int32_t *type) {
  // Every array element / map entry / string byte costs at least one input byte: no limit above the size.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limit(n, n, n, n, n, /*depth=*/16);
  size_t offset = 0;
  *handle = msgpack::unpack(bytes.data(), n, offset, nullptr, nullptr, limit);
  if (offset != n) throw DecodeError("message: " + std::to_string(n - offset) + " trailing bytes");
  const msgpack::object *f = array_of(handle->get(), 2, "message");
  *type = get<int32_t>(f[0], "message.type");
  return f;
}

}  // namespace

std::string encode_message(const ToCoreMessage &message) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2);
  if (const auto *r = std::get_if<EngineCoreRequest>(&message)) {
    pk.pack(static_cast<int32_t>(kAddRequest));
    pack_request(pk, *r);
  } else if (const auto *a = std::get_if<AbortRequests>(&message)) {
    pk.pack(static_cast<int32_t>(kAbort));
    pk.pack(a->request_ids);
  } else if (const auto *s = std::get_if<FinishRequestsStopped>(&message)) {
    pk.pack(static_cast<int32_t>(kFinishStopped));
    pk.pack_array(static_cast<uint32_t>(s->stops.size()));
    for (const auto &[id, stop] : s->stops) {
      pk.pack_array(2);
      pk.pack(id);
      pk.pack(stop);
    }
  } else {
    pk.pack(static_cast<int32_t>(kShutdown));
    pk.pack_nil();
  }
  return finish(buf);
}

std::string encode_message(const FromCoreMessage &message) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(2);
  if (const auto *r = std::get_if<EngineCoreReady>(&message)) {
    pk.pack(static_cast<int32_t>(kReady));
    pk.pack_array(4);
    pk.pack(r->vocab_size);
    pk.pack(r->max_model_len);
    pack_optional(pk, r->eos_token_id);
    pk.pack(r->extra_eos_ids);
  } else if (const auto *f = std::get_if<EngineCoreFailure>(&message)) {
    pk.pack(static_cast<int32_t>(kFailure));
    pk.pack_array(2);
    pk.pack(static_cast<int32_t>(f->code));
    pk.pack(f->message);
  } else {
    pk.pack(static_cast<int32_t>(kOutputs));
    pack_outputs(pk, std::get<EngineCoreOutputs>(message));
  }
  return finish(buf);
}

StatusOr<ToCoreMessage> decode_to_core(std::string_view bytes) {
  try {
    msgpack::object_handle handle;
    int32_t type = 0;
    const msgpack::object *f = unpack_envelope(bytes, &handle, &type);
    switch (type) {
      case kAddRequest:
        return ToCoreMessage(unpack_request(f[1]));
      case kAbort:
        return ToCoreMessage(AbortRequests{get_vector<std::string>(f[1], "abort.request_ids")});
      case kFinishStopped: {
        FinishRequestsStopped s;
        uint32_t n = 0;
        const msgpack::object *items = array_of(f[1], -1, "finish_stopped", &n);
        for (uint32_t i = 0; i < n; ++i) {
          const msgpack::object *kv = array_of(items[i], 2, "finish_stopped");
          s.stops.emplace_back(get<std::string>(kv[0], "finish_stopped.request_id"),
                               get<std::string>(kv[1], "finish_stopped.stop"));
        }
        return ToCoreMessage(std::move(s));
      }
      case kShutdown:
        return ToCoreMessage(ShutdownCore{});
      default:
        return data_loss("message.type: " + std::to_string(type) + " is not a frontend -> core message");
    }
  } catch (const std::exception &e) {
    return data_loss(std::string("malformed frontend -> core message: ") + e.what());
  }
}

StatusOr<FromCoreMessage> decode_from_core(std::string_view bytes) {
  try {
    msgpack::object_handle handle;
    int32_t type = 0;
    const msgpack::object *f = unpack_envelope(bytes, &handle, &type);
    switch (type) {
      case kReady: {
        const msgpack::object *r = array_of(f[1], 4, "ready");
        EngineCoreReady ready;
        ready.vocab_size = get<int64_t>(r[0], "ready.vocab_size");
        ready.max_model_len = get<int64_t>(r[1], "ready.max_model_len");
        ready.eos_token_id = get_optional<int32_t>(r[2], "ready.eos_token_id");
        ready.extra_eos_ids = get_vector<int32_t>(r[3], "ready.extra_eos_ids");
        return FromCoreMessage(std::move(ready));
      }
      case kFailure: {
        const msgpack::object *r = array_of(f[1], 2, "failure");
        EngineCoreFailure failure;
        const int32_t code = get<int32_t>(r[0], "failure.code");
        if (code <= 0 || code > static_cast<int32_t>(StatusCode::kAborted)) {
          throw DecodeError("failure.code: " + std::to_string(code) + " is not an error code");
        }
        failure.code = static_cast<StatusCode>(code);
        failure.message = get<std::string>(r[1], "failure.message");
        return FromCoreMessage(std::move(failure));
      }
      case kOutputs:
        return FromCoreMessage(unpack_outputs(f[1]));
      default:
        return data_loss("message.type: " + std::to_string(type) + " is not a core -> frontend message");
    }
  } catch (const std::exception &e) {
    return data_loss(std::string("malformed core -> frontend message: ") + e.what());
  }
}

}  // namespace llmserve
