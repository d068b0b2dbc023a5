// Codec: table-driven msgpack. Each struct's wire fields are listed once (kFields below: name + member); packing,
// checked unpacking and the error names all come from that list, so adding a field is one line. msgpack
// exceptions stop here (caught in decode_*), and the unpack limits are tied to the message size so a forged
// length cannot make the decoder allocate more than a small multiple of the bytes it was given.
#include "ipc/codec.h"

#include <array>
#include <msgpack.hpp>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace llmserve {
namespace {

// ---- the field lists (the wire contract: names are stable, order is not) ----

template <typename T, typename M>
struct Field {
  const char *name;
  M T::*member;
};
template <typename T, typename M>
constexpr Field<T, M> field(const char *name, M T::*member) {
  return {name, member};
}

// Wire<T>::kName names T in errors; Wire<T>::kFields is its field list; messages also have a kType tag.
template <typename T>
struct Wire;

template <>
struct Wire<StructuredOutputsParams> {
  static constexpr const char *kName = "structured_outputs";
  using P = StructuredOutputsParams;
  static constexpr auto kFields =
      std::make_tuple(field("json", &P::json), field("regex", &P::regex), field("choice", &P::choice),
                      field("grammar", &P::grammar), field("json_object", &P::json_object));
};

template <>
struct Wire<SamplingParams> {
  static constexpr const char *kName = "sampling_params";
  using P = SamplingParams;
  static constexpr auto kFields = std::make_tuple(
      field("n", &P::n), field("temperature", &P::temperature), field("top_p", &P::top_p), field("top_k", &P::top_k),
      field("min_p", &P::min_p), field("seed", &P::seed), field("max_tokens", &P::max_tokens),
      field("min_tokens", &P::min_tokens), field("stop", &P::stop), field("stop_token_ids", &P::stop_token_ids),
      field("ignore_eos", &P::ignore_eos), field("include_stop_str_in_output", &P::include_stop_str_in_output),
      field("presence_penalty", &P::presence_penalty), field("frequency_penalty", &P::frequency_penalty),
      field("repetition_penalty", &P::repetition_penalty), field("logit_bias", &P::logit_bias),
      field("logprobs", &P::logprobs), field("prompt_logprobs", &P::prompt_logprobs),
      field("skip_special_tokens", &P::skip_special_tokens),
      field("spaces_between_special_tokens", &P::spaces_between_special_tokens),
      field("structured_outputs", &P::structured_outputs));
};

template <>
struct Wire<EngineCoreRequest> {
  static constexpr const char *kName = "request";
  static constexpr int32_t kType = 1;
  using R = EngineCoreRequest;
  static constexpr auto kFields = std::make_tuple(
      field("request_id", &R::request_id), field("prompt_token_ids", &R::prompt_token_ids),
      field("sampling_params", &R::sampling_params), field("arrival_time", &R::arrival_time),
      field("priority", &R::priority), field("eos_token_id", &R::eos_token_id), field("cache_salt", &R::cache_salt));
};

template <>
struct Wire<AbortRequests> {
  static constexpr const char *kName = "abort";
  static constexpr int32_t kType = 2;
  static constexpr auto kFields = std::make_tuple(field("request_ids", &AbortRequests::request_ids));
};

template <>
struct Wire<FinishRequestsStopped> {
  static constexpr const char *kName = "finish_stopped";
  static constexpr int32_t kType = 3;
  static constexpr auto kFields = std::make_tuple(field("stops", &FinishRequestsStopped::stops));
};

template <>
struct Wire<ShutdownCore> {
  static constexpr const char *kName = "shutdown";
  static constexpr int32_t kType = 4;
  static constexpr auto kFields = std::make_tuple();
};

template <>
struct Wire<EngineCoreReady> {
  static constexpr const char *kName = "ready";
  static constexpr int32_t kType = 11;
  using I = EngineCoreInfo;
  static constexpr auto kFields = std::make_tuple(
      field("vocab_size", &I::vocab_size), field("max_model_len", &I::max_model_len),
      field("scheduling_policy", &I::scheduling_policy), field("model_eos_token_ids", &I::model_eos_token_ids));
};

template <>
struct Wire<EngineCoreFailure> {
  static constexpr const char *kName = "failure";
  static constexpr int32_t kType = 12;
  static constexpr auto kFields =
      std::make_tuple(field("code", &EngineCoreFailure::code), field("message", &EngineCoreFailure::message));
};

template <>
struct Wire<TokenLogprobs> {
  static constexpr const char *kName = "logprobs";
  using L = TokenLogprobs;
  static constexpr auto kFields = std::make_tuple(field("token_ids", &L::token_ids), field("logprobs", &L::logprobs),
                                                  field("sampled_token_rank", &L::sampled_token_rank));
};

template <>
struct Wire<EngineCoreEvent> {
  static constexpr const char *kName = "event";
  static constexpr auto kFields =
      std::make_tuple(field("type", &EngineCoreEvent::type), field("timestamp", &EngineCoreEvent::timestamp));
};

template <>
struct Wire<EngineCoreOutput> {
  static constexpr const char *kName = "output";
  using O = EngineCoreOutput;
  static constexpr auto kFields =
      std::make_tuple(field("request_id", &O::request_id), field("new_token_ids", &O::new_token_ids),
                      field("new_logprobs", &O::new_logprobs), field("new_prompt_logprobs", &O::new_prompt_logprobs),
                      field("finish_reason", &O::finish_reason), field("stop_reason", &O::stop_reason),
                      field("num_cached_tokens", &O::num_cached_tokens), field("events", &O::events));
};

template <>
struct Wire<SchedulerStats> {
  static constexpr const char *kName = "scheduler_stats";
  using S = SchedulerStats;
  static constexpr auto kFields = std::make_tuple(
      field("num_running_reqs", &S::num_running_reqs), field("num_waiting_reqs", &S::num_waiting_reqs),
      field("kv_cache_usage", &S::kv_cache_usage), field("prefix_cache_requests", &S::prefix_cache_requests),
      field("prefix_cache_queries", &S::prefix_cache_queries), field("prefix_cache_hits", &S::prefix_cache_hits),
      field("num_preemptions", &S::num_preemptions));
};

template <>
struct Wire<EngineCoreOutputs> {
  static constexpr const char *kName = "outputs";
  static constexpr int32_t kType = 13;
  using O = EngineCoreOutputs;
  static constexpr auto kFields = std::make_tuple(
      field("outputs", &O::outputs), field("scheduler_stats", &O::scheduler_stats), field("timestamp", &O::timestamp));
};

// The valid integer range of each enum on the wire.
template <typename E>
struct EnumRange;
template <>
struct EnumRange<FinishReason> {
  static constexpr FinishReason kMin = FinishReason::kStop, kMax = FinishReason::kAbort;
};
template <>
struct EnumRange<EngineCoreEventType> {
  static constexpr EngineCoreEventType kMin = EngineCoreEventType::kQueued, kMax = EngineCoreEventType::kPreempted;
};
template <>
struct EnumRange<StatusCode> {  // a failure carries an error: kOk is not valid
  static constexpr StatusCode kMin = StatusCode::kInvalidArgument, kMax = StatusCode::kAborted;
};
template <>
struct EnumRange<SchedulingPolicy> {
  static constexpr SchedulingPolicy kMin = SchedulingPolicy::kFcfs, kMax = SchedulingPolicy::kPriority;
};

template <typename T>
concept WireStruct = requires {
  Wire<T>::kFields;
};

template <typename Tuple, typename F>
void for_each_field(const Tuple &fields, F &&f) {
  std::apply([&](const auto &...x) { (f(x), ...); }, fields);
}

// ---- packing ----

using Packer = msgpack::packer<msgpack::sbuffer>;

// Every overload is declared before the templates that call it (unqualified lookup sees only those).
template <typename T>
void pack_value(Packer &pk, const T &v);
template <typename T>
void pack(Packer &pk, const T &v);
void pack(Packer &pk, const RequestId &v);
template <typename T>
void pack(Packer &pk, const std::optional<T> &v);
template <typename T>
void pack(Packer &pk, const std::vector<T> &v);
template <typename A, typename B>
void pack(Packer &pk, const std::pair<A, B> &v);
void pack(Packer &pk, const StopReason &v);

template <typename T>
void pack_value(Packer &pk, const T &v) {
  if constexpr (WireStruct<T>) {
    pk.pack_map(static_cast<uint32_t>(std::tuple_size_v<std::decay_t<decltype(Wire<T>::kFields)>>));
    for_each_field(Wire<T>::kFields, [&](const auto &f) {
      pk.pack(std::string_view(f.name));
      pack_value(pk, v.*(f.member));
    });
  } else if constexpr (std::is_enum_v<T>) {
    pk.pack(static_cast<int32_t>(v));
  } else {
    pack(pk, v);
  }
}

template <typename T>
void pack(Packer &pk, const T &v) {
  pk.pack(v);  // bool, integers, floating point, std::string
}
void pack(Packer &pk, const RequestId &v) { pk.pack(v.str()); }
template <typename T>
void pack(Packer &pk, const std::optional<T> &v) {
  if (v) {
    pack_value(pk, *v);
  } else {
    pk.pack_nil();
  }
}
template <typename T>
void pack(Packer &pk, const std::vector<T> &v) {
  pk.pack_array(static_cast<uint32_t>(v.size()));
  for (const T &x : v) pack_value(pk, x);
}
template <typename A, typename B>
void pack(Packer &pk, const std::pair<A, B> &v) {
  pk.pack_array(2);
  pack_value(pk, v.first);
  pack_value(pk, v.second);
}
// A stop reason: nil (EOS / none), an integer (stop token id) or a string (stop string).
void pack(Packer &pk, const StopReason &v) {
  if (const auto *id = std::get_if<int32_t>(&v)) {
    pk.pack(*id);
  } else if (const auto *str = std::get_if<std::string>(&v)) {
    pk.pack(*str);
  } else {
    pk.pack_nil();
  }
}

// ---- unpacking (throws DecodeError / msgpack exceptions, caught in decode_*) ----

struct DecodeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Where a value sits, for error messages: "<struct>.<field>".
struct Where {
  const char *outer;
  const char *name;
  std::string str() const { return std::string(outer) + "." + name; }
};

// The elements of `o`, which must be an array of exactly `n` (or, with n < 0, any number of) elements.
const msgpack::object *array_of(const msgpack::object &o, int64_t n, const std::string &what, uint32_t *size) {
  if (o.type != msgpack::type::ARRAY) throw DecodeError(what + ": expected an array");
  if (n >= 0 && o.via.array.size != static_cast<uint32_t>(n)) {
    throw DecodeError(what + ": expected " + std::to_string(n) + " elements, got " + std::to_string(o.via.array.size));
  }
  *size = o.via.array.size;
  return o.via.array.ptr;
}

template <typename T>
void unpack(const msgpack::object &o, T *out, const Where &at);
void unpack(const msgpack::object &o, RequestId *out, const Where &at);
template <typename T>
void unpack(const msgpack::object &o, std::optional<T> *out, const Where &at);
template <typename T>
void unpack(const msgpack::object &o, std::vector<T> *out, const Where &at);
template <typename A, typename B>
void unpack(const msgpack::object &o, std::pair<A, B> *out, const Where &at);
void unpack(const msgpack::object &o, StopReason *out, const Where &at);

template <WireStruct T>
void unpack_struct(const msgpack::object &o, T *out) {
  using W = Wire<T>;
  constexpr size_t kNumFields = std::tuple_size_v<std::decay_t<decltype(W::kFields)>>;
  if (o.type != msgpack::type::MAP) throw DecodeError(std::string(W::kName) + ": expected a map");
  std::array<bool, kNumFields> seen{};
  for (uint32_t k = 0; k < o.via.map.size; ++k) {
    const msgpack::object_kv &kv = o.via.map.ptr[k];
    if (kv.key.type != msgpack::type::STR) continue;  // not a field name this build knows: ignored
    const std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
    size_t i = 0;
    for_each_field(W::kFields, [&](const auto &f) {
      if (key == f.name) {
        if (seen[i]) throw DecodeError(std::string(W::kName) + "." + f.name + ": given twice");
        seen[i] = true;
        unpack(kv.val, &(out->*(f.member)), Where{W::kName, f.name});
      }
      ++i;
    });  // a key matching no field is a newer peer's addition: ignored
  }
  size_t i = 0;
  for_each_field(W::kFields, [&](const auto &f) {
    if (!seen[i++]) throw DecodeError(std::string(W::kName) + "." + f.name + ": missing");
  });
}

template <typename T>
void unpack(const msgpack::object &o, T *out, const Where &at) {
  if constexpr (WireStruct<T>) {
    unpack_struct(o, out);
  } else if constexpr (std::is_enum_v<T>) {
    int32_t v = 0;
    unpack(o, &v, at);
    if (v < static_cast<int32_t>(EnumRange<T>::kMin) || v > static_cast<int32_t>(EnumRange<T>::kMax)) {
      throw DecodeError(at.str() + ": " + std::to_string(v) + " is not a valid value");
    }
    *out = static_cast<T>(v);
  } else {
    try {
      *out = o.as<T>();  // bool, integers (range-checked), floating point, std::string
    } catch (const std::exception &) {
      throw DecodeError(at.str() + ": wrong type or out of range");
    }
  }
}
void unpack(const msgpack::object &o, RequestId *out, const Where &at) {
  std::string s;
  unpack(o, &s, at);
  *out = RequestId(std::move(s));
}
template <typename T>
void unpack(const msgpack::object &o, std::optional<T> *out, const Where &at) {
  if (o.is_nil()) {
    out->reset();
    return;
  }
  T v;
  unpack(o, &v, at);
  *out = std::move(v);
}
template <typename T>
void unpack(const msgpack::object &o, std::vector<T> *out, const Where &at) {
  uint32_t n = 0;
  const msgpack::object *items = array_of(o, -1, at.str(), &n);
  out->clear();
  out->reserve(n);
  for (uint32_t i = 0; i < n; ++i) unpack(items[i], &out->emplace_back(), at);
}
template <typename A, typename B>
void unpack(const msgpack::object &o, std::pair<A, B> *out, const Where &at) {
  uint32_t n = 0;
  const msgpack::object *items = array_of(o, 2, at.str(), &n);
  unpack(items[0], &out->first, at);
  unpack(items[1], &out->second, at);
}
void unpack(const msgpack::object &o, StopReason *out, const Where &at) {
  if (o.is_nil()) {
    *out = std::monostate{};
  } else if (o.type == msgpack::type::STR) {
    std::string s;
    unpack(o, &s, at);
    *out = std::move(s);
  } else {
    int32_t id = 0;
    unpack(o, &id, at);
    *out = id;
  }
}

// ---- messages ----

template <typename Variant>
std::string encode_variant(const Variant &message) {
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack(kCodecVersion);
  std::visit(
      [&](const auto &m) {
        pk.pack(Wire<std::decay_t<decltype(m)>>::kType);
        pack_value(pk, m);
      },
      message);
  return std::string(buf.data(), buf.size());
}

// The alternative of Variant whose type tag is `type`, decoded from `body`; false when no alternative has it.
template <typename Variant, size_t I = 0>
bool decode_alternative(int32_t type, const msgpack::object &body, Variant *out) {
  if constexpr (I == std::variant_size_v<Variant>) {
    return false;
  } else {
    using T = std::variant_alternative_t<I, Variant>;
    if (type != Wire<T>::kType) return decode_alternative<Variant, I + 1>(type, body, out);
    T value;
    unpack_struct(body, &value);
    *out = std::move(value);
    return true;
  }
}

template <typename Variant>
StatusOr<Variant> decode_variant(std::string_view bytes, const char *direction) {
  try {
    // Every array element / map entry / string byte costs at least one input byte: no limit above the size.
    const size_t n = bytes.size();
    const msgpack::unpack_limit limit(n, n, n, n, n, /*depth=*/16);
    size_t offset = 0;
    msgpack::object_handle handle = msgpack::unpack(bytes.data(), n, offset, nullptr, nullptr, limit);
    if (offset != n) throw DecodeError("message: " + std::to_string(n - offset) + " trailing bytes");
    const msgpack::object &root = handle.get();
    if (root.type != msgpack::type::ARRAY || root.via.array.size == 0) {
      throw DecodeError("message: expected an array [version, type, body]");
    }
    // The version first: another build's message is refused as such, whatever its shape.
    int32_t version = 0;
    unpack(root.via.array.ptr[0], &version, Where{"message", "version"});
    if (version != kCodecVersion) {
      return data_loss("message.version: " + std::to_string(version) + ", but this build speaks version " +
                       std::to_string(kCodecVersion) + " (the frontend and the engine-core process differ)");
    }
    uint32_t size = 0;
    const msgpack::object *f = array_of(root, 3, "message", &size);
    int32_t type = 0;
    unpack(f[1], &type, Where{"message", "type"});
    Variant out;
    if (!decode_alternative(type, f[2], &out)) {
      return data_loss("message.type: " + std::to_string(type) + " is not a " + direction + " message");
    }
    return out;
  } catch (const std::exception &e) {
    return data_loss(std::string("malformed ") + direction + " message: " + e.what());
  }
}

}  // namespace

std::string encode_message(const ToCoreMessage &message) { return encode_variant(message); }
std::string encode_message(const FromCoreMessage &message) { return encode_variant(message); }

StatusOr<ToCoreMessage> decode_to_core(std::string_view bytes) {
  return decode_variant<ToCoreMessage>(bytes, "frontend -> core");
}
StatusOr<FromCoreMessage> decode_from_core(std::string_view bytes) {
  return decode_variant<FromCoreMessage>(bytes, "core -> frontend");
}

}  // namespace llmserve
