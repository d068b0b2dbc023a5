// The msgpack codec: random messages of every kind, with every field set to random values (optionals both
// set and empty, every stop-reason kind), survive encode -> decode field for field; every struct is a map with
// exactly its listed field names; another version, a missing or ill-typed field is an error naming it, an
// unknown field is ignored; malformed bytes (every truncation, random flips, garbage, forged huge lengths, wrong
// tags / enum values, trailing bytes) give an error or a well-formed message, never a crash or a huge allocation.
#include "ipc/codec.h"

#include <gtest/gtest.h>

#include <functional>
#include <msgpack.hpp>
#include <random>

namespace llmserve {
namespace {

class Gen {
 public:
  explicit Gen(uint32_t seed) : rng_(seed) {}
  int64_t i(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng_); }
  double d() { return std::uniform_real_distribution<double>(-1e6, 1e6)(rng_); }
  bool b() { return i(0, 1) == 1; }
  std::string s() {
    std::string out(static_cast<size_t>(i(0, 12)), '\0');
    for (char &c : out) c = static_cast<char>(i(0, 255));  // any bytes: ids and stop strings are opaque
    return out;
  }
  std::vector<int32_t> ids() {
    std::vector<int32_t> v(static_cast<size_t>(i(0, 9)));
    for (int32_t &x : v) x = static_cast<int32_t>(i(INT32_MIN, INT32_MAX));
    return v;
  }
  template <typename T>
  std::optional<T> opt(T v) {
    return b() ? std::optional<T>(v) : std::nullopt;
  }
  std::vector<TokenLogprobs> logprobs() {
    std::vector<TokenLogprobs> v(static_cast<size_t>(i(0, 3)));
    for (TokenLogprobs &t : v) {
      t.token_ids = ids();
      for (size_t k = 0; k < t.token_ids.size(); ++k) t.logprobs.push_back(static_cast<float>(d()));
      t.sampled_token_rank = static_cast<int32_t>(i(0, 100000));
    }
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

SamplingParams random_params(Gen &g) {
  SamplingParams p;
  p.n = static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX));
  p.temperature = g.d();
  p.top_p = g.d();
  p.top_k = static_cast<int32_t>(g.i(-5, 1000));
  p.min_p = g.d();
  p.seed = g.opt<int64_t>(g.i(INT64_MIN, INT64_MAX));
  p.max_tokens = g.opt<int64_t>(g.i(-10, INT64_MAX));
  p.min_tokens = g.i(INT64_MIN, INT64_MAX);
  for (int k = static_cast<int>(g.i(0, 3)); k > 0; --k) p.stop.push_back(g.s());
  p.stop_token_ids = g.ids();
  p.ignore_eos = g.b();
  p.include_stop_str_in_output = g.b();
  p.presence_penalty = g.d();
  p.frequency_penalty = g.d();
  p.repetition_penalty = g.d();
  for (int k = static_cast<int>(g.i(0, 3)); k > 0; --k) {
    p.logit_bias.emplace_back(static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX)), g.d());
  }
  p.logprobs = g.opt<int32_t>(static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX)));
  p.prompt_logprobs = g.opt<int32_t>(static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX)));
  p.skip_special_tokens = g.b();
  p.spaces_between_special_tokens = g.b();
  if (g.b()) {  // structured output: each optional field set or not at random (the wire does not check "exactly one")
    StructuredOutputsParams so;
    if (g.b()) so.json = g.s();
    if (g.b()) so.regex = g.s();
    if (g.b()) so.choice = std::vector<std::string>{g.s(), g.s()};
    if (g.b()) so.grammar = g.s();
    so.json_object = g.b();
    p.structured_outputs = so;
  }
  return p;
}

EngineCoreRequest random_request(Gen &g) {
  EngineCoreRequest r;
  r.request_id = g.s();
  r.prompt_token_ids = g.ids();
  r.sampling_params = random_params(g);
  r.arrival_time = g.d();
  r.priority = static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX));
  r.eos_token_id = g.opt<int32_t>(static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX)));
  r.cache_salt = static_cast<uint64_t>(g.i(INT64_MIN, INT64_MAX));
  return r;
}

EngineCoreOutputs random_outputs(Gen &g) {
  EngineCoreOutputs outs;
  for (int k = static_cast<int>(g.i(0, 4)); k > 0; --k) {
    EngineCoreOutput &o = outs.outputs.emplace_back();
    o.request_id = g.s();
    o.new_token_ids = g.ids();
    o.new_logprobs = g.logprobs();
    o.new_prompt_logprobs = g.logprobs();
    if (g.b()) o.finish_reason = static_cast<FinishReason>(g.i(0, 2));
    switch (g.i(0, 2)) {
      case 0:
        o.stop_reason = std::monostate{};
        break;
      case 1:
        o.stop_reason = static_cast<int32_t>(g.i(INT32_MIN, INT32_MAX));
        break;
      default:
        o.stop_reason = g.s();
    }
    o.num_cached_tokens = g.i(0, INT64_MAX);
    for (int e = static_cast<int>(g.i(0, 3)); e > 0; --e) {
      o.events.push_back({static_cast<EngineCoreEventType>(g.i(0, 2)), g.d()});
    }
  }
  SchedulerStats &s = outs.scheduler_stats;
  s.num_running_reqs = g.i(0, 1000);
  s.num_waiting_reqs = g.i(0, 1000);
  s.kv_cache_usage = g.d();
  s.prefix_cache_requests = g.i(0, INT64_MAX);
  s.prefix_cache_queries = g.i(0, INT64_MAX);
  s.prefix_cache_hits = g.i(0, INT64_MAX);
  s.num_preemptions = g.i(0, INT64_MAX);
  outs.timestamp = g.d();
  return outs;
}

void expect_params_eq(const SamplingParams &a, const SamplingParams &b) {
  EXPECT_EQ(a.n, b.n);
  EXPECT_EQ(a.temperature, b.temperature);
  EXPECT_EQ(a.top_p, b.top_p);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.min_p, b.min_p);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.max_tokens, b.max_tokens);
  EXPECT_EQ(a.min_tokens, b.min_tokens);
  EXPECT_EQ(a.stop, b.stop);
  EXPECT_EQ(a.stop_token_ids, b.stop_token_ids);
  EXPECT_EQ(a.ignore_eos, b.ignore_eos);
  EXPECT_EQ(a.include_stop_str_in_output, b.include_stop_str_in_output);
  EXPECT_EQ(a.presence_penalty, b.presence_penalty);
  EXPECT_EQ(a.frequency_penalty, b.frequency_penalty);
  EXPECT_EQ(a.repetition_penalty, b.repetition_penalty);
  EXPECT_EQ(a.logit_bias, b.logit_bias);
  EXPECT_EQ(a.logprobs, b.logprobs);
  EXPECT_EQ(a.prompt_logprobs, b.prompt_logprobs);
  EXPECT_EQ(a.skip_special_tokens, b.skip_special_tokens);
  EXPECT_EQ(a.spaces_between_special_tokens, b.spaces_between_special_tokens);
  EXPECT_EQ(a.structured_outputs, b.structured_outputs);
}

void expect_logprobs_eq(const std::vector<TokenLogprobs> &a, const std::vector<TokenLogprobs> &b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].token_ids, b[i].token_ids);
    EXPECT_EQ(a[i].logprobs, b[i].logprobs);
    EXPECT_EQ(a[i].sampled_token_rank, b[i].sampled_token_rank);
  }
}

void expect_outputs_eq(const EngineCoreOutputs &a, const EngineCoreOutputs &b) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size());
  for (size_t i = 0; i < a.outputs.size(); ++i) {
    const EngineCoreOutput &x = a.outputs[i], &y = b.outputs[i];
    EXPECT_EQ(x.request_id.str(), y.request_id.str());
    EXPECT_EQ(x.new_token_ids, y.new_token_ids);
    expect_logprobs_eq(x.new_logprobs, y.new_logprobs);
    expect_logprobs_eq(x.new_prompt_logprobs, y.new_prompt_logprobs);
    EXPECT_EQ(x.finish_reason, y.finish_reason);
    EXPECT_EQ(x.stop_reason, y.stop_reason);
    EXPECT_EQ(x.num_cached_tokens, y.num_cached_tokens);
    ASSERT_EQ(x.events.size(), y.events.size());
    for (size_t e = 0; e < x.events.size(); ++e) {
      EXPECT_EQ(x.events[e].type, y.events[e].type);
      EXPECT_EQ(x.events[e].timestamp, y.events[e].timestamp);
    }
  }
  const SchedulerStats &s = a.scheduler_stats, &t = b.scheduler_stats;
  EXPECT_EQ(s.num_running_reqs, t.num_running_reqs);
  EXPECT_EQ(s.num_waiting_reqs, t.num_waiting_reqs);
  EXPECT_EQ(s.kv_cache_usage, t.kv_cache_usage);
  EXPECT_EQ(s.prefix_cache_requests, t.prefix_cache_requests);
  EXPECT_EQ(s.prefix_cache_queries, t.prefix_cache_queries);
  EXPECT_EQ(s.prefix_cache_hits, t.prefix_cache_hits);
  EXPECT_EQ(s.num_preemptions, t.num_preemptions);
  EXPECT_EQ(a.timestamp, b.timestamp);
}

TEST(CodecTest, RandomToCoreMessagesRoundTrip) {
  Gen g(1);
  for (int iter = 0; iter < 300; ++iter) {
    const int kind = iter % 4;
    ToCoreMessage m;
    if (kind == 0) {
      m = random_request(g);
    } else if (kind == 1) {
      AbortRequests a;
      for (int k = static_cast<int>(g.i(0, 4)); k > 0; --k) a.request_ids.push_back(g.s());
      m = a;
    } else if (kind == 2) {
      FinishRequestsStopped f;
      for (int k = static_cast<int>(g.i(0, 4)); k > 0; --k) f.stops.emplace_back(g.s(), g.s());
      m = f;
    } else {
      m = ShutdownCore{};
    }
    StatusOr<ToCoreMessage> back = decode_to_core(encode_message(m));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->index(), m.index());
    if (kind == 0) {
      const auto &x = std::get<EngineCoreRequest>(m), &y = std::get<EngineCoreRequest>(*back);
      EXPECT_EQ(x.request_id, y.request_id);
      EXPECT_EQ(x.prompt_token_ids, y.prompt_token_ids);
      expect_params_eq(x.sampling_params, y.sampling_params);
      EXPECT_EQ(x.arrival_time, y.arrival_time);
      EXPECT_EQ(x.priority, y.priority);
      EXPECT_EQ(x.eos_token_id, y.eos_token_id);
      EXPECT_EQ(x.cache_salt, y.cache_salt);
    } else if (kind == 1) {
      EXPECT_EQ(std::get<AbortRequests>(m).request_ids, std::get<AbortRequests>(*back).request_ids);
    } else if (kind == 2) {
      EXPECT_EQ(std::get<FinishRequestsStopped>(m).stops, std::get<FinishRequestsStopped>(*back).stops);
    }
  }
}

TEST(CodecTest, RandomFromCoreMessagesRoundTrip) {
  Gen g(2);
  for (int iter = 0; iter < 300; ++iter) {
    const int kind = iter % 3;
    FromCoreMessage m;
    if (kind == 0) {
      m = random_outputs(g);
    } else if (kind == 1) {
      m = EngineCoreReady{g.i(0, INT64_MAX), g.i(0, INT64_MAX), static_cast<SchedulingPolicy>(g.i(0, 1)), g.ids()};
    } else {
      m = EngineCoreFailure{static_cast<StatusCode>(g.i(1, static_cast<int64_t>(StatusCode::kAborted))), g.s()};
    }
    StatusOr<FromCoreMessage> back = decode_from_core(encode_message(m));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(back->index(), m.index());
    if (kind == 0) {
      expect_outputs_eq(std::get<EngineCoreOutputs>(m), std::get<EngineCoreOutputs>(*back));
    } else if (kind == 1) {
      const auto &x = std::get<EngineCoreReady>(m), &y = std::get<EngineCoreReady>(*back);
      EXPECT_EQ(x.vocab_size, y.vocab_size);
      EXPECT_EQ(x.max_model_len, y.max_model_len);
      EXPECT_EQ(x.scheduling_policy, y.scheduling_policy);
      EXPECT_EQ(x.model_eos_token_ids, y.model_eos_token_ids);
    } else {
      EXPECT_EQ(std::get<EngineCoreFailure>(m).code, std::get<EngineCoreFailure>(*back).code);
      EXPECT_EQ(std::get<EngineCoreFailure>(m).message, std::get<EngineCoreFailure>(*back).message);
    }
  }
}

TEST(CodecTest, EveryTruncationIsAnError) {
  Gen g(3);
  for (int iter = 0; iter < 20; ++iter) {
    const std::string req = encode_message(ToCoreMessage(random_request(g)));
    const std::string outs = encode_message(FromCoreMessage(random_outputs(g)));
    for (size_t n = 0; n < req.size(); ++n) EXPECT_FALSE(decode_to_core(req.substr(0, n)).ok()) << n;
    for (size_t n = 0; n < outs.size(); ++n) EXPECT_FALSE(decode_from_core(outs.substr(0, n)).ok()) << n;
    EXPECT_FALSE(decode_to_core(req + "x").ok());  // trailing bytes
    EXPECT_FALSE(decode_from_core(outs + '\0').ok());
    // Each direction rejects the other's messages (the type tags differ).
    EXPECT_FALSE(decode_from_core(req).ok());
    EXPECT_FALSE(decode_to_core(outs).ok());
  }
}

TEST(CodecTest, FlippedAndRandomBytesNeverCrash) {
  Gen g(4);
  int num_errors = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::string bytes = iter % 2 == 0 ? encode_message(ToCoreMessage(random_request(g)))
                                      : encode_message(FromCoreMessage(random_outputs(g)));
    for (int k = static_cast<int>(g.i(1, 4)); k > 0; --k) {
      bytes[static_cast<size_t>(g.i(0, static_cast<int64_t>(bytes.size()) - 1))] = static_cast<char>(g.i(0, 255));
    }
    const bool a = decode_to_core(bytes).ok();
    const bool b = decode_from_core(bytes).ok();
    num_errors += !a && !b;
    std::string garbage(static_cast<size_t>(g.i(0, 64)), '\0');
    for (char &c : garbage) c = static_cast<char>(g.i(0, 255));
    (void)decode_to_core(garbage);
    (void)decode_from_core(garbage);
  }
  EXPECT_GT(num_errors, 0);
}

TEST(CodecTest, HandCraftedBadMessages) {
  auto bytes = [](std::initializer_list<int> b) {
    std::string s;
    for (int x : b) s.push_back(static_cast<char>(x));
    return s;
  };
  struct Case {
    std::string what, bytes, expected;
  };
  // Messages are [version = 1, type, body]: 0x93 0x01 <type> <body>.
  const std::vector<Case> cases = {
      {"empty", "", "malformed"},
      {"not an array", bytes({0x01}), "message: expected an array"},
      {"empty array", bytes({0x90}), "message: expected an array"},
      {"version 2", bytes({0x93, 0x02, 0x01, 0x80}), "message.version: 2, but this build speaks version 1"},
      {"version 2, another shape", bytes({0x91, 0x02}), "message.version: 2"},
      {"version a string", bytes({0x93, 0xa1, 'x', 0x01, 0x80}), "message.version: wrong type"},
      {"two elements", bytes({0x92, 0x01, 0x01}), "message: expected 3 elements"},
      {"unknown type", bytes({0x93, 0x01, 0x63, 0x80}), "message.type: 99"},
      {"type is a string", bytes({0x93, 0x01, 0xa1, 'x', 0x80}), "message.type"},
      {"body not a map", bytes({0x93, 0x01, 0x01, 0x90}), "request: expected a map"},
      {"empty request", bytes({0x93, 0x01, 0x01, 0x80}), "request.request_id: missing"},
      // A map header claiming 2^32 - 1 entries in a short message: refused by the size-tied limit.
      {"forged map length", bytes({0x93, 0x01, 0x02, 0xdf, 0xff, 0xff, 0xff, 0xff, 0xa0, 0xa0}), "malformed"},
      {"forged string length", bytes({0x93, 0x01, 0x02, 0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}), "malformed"},
      {"abort ids not strings",
       bytes({0x93, 0x01, 0x02, 0x81, 0xab, 'r', 'e', 'q', 'u', 'e', 's', 't', '_', 'i', 'd', 's', 0x91, 0x05}),
       "abort.request_ids: wrong type"},
      {"deep nesting", std::string(40, static_cast<char>(0x91)) + bytes({0xc0}), "malformed"},
  };
  for (const Case &c : cases) {
    StatusOr<ToCoreMessage> m = decode_to_core(c.bytes);
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss) << c.what;
    EXPECT_NE(m.status().message().find(c.expected), std::string::npos) << c.what << ": " << m.status().message();
  }
  // Enum values out of range in an otherwise valid outputs message.
  EngineCoreOutputs outs;
  EngineCoreOutput &o = outs.outputs.emplace_back();
  o.request_id = "r";
  o.finish_reason = FinishReason::kAbort;
  o.events.push_back({EngineCoreEventType::kPreempted, 1.0});
  std::string good = encode_message(FromCoreMessage(outs));
  ASSERT_TRUE(decode_from_core(good).ok());
  const std::string key =
      "\xad"
      "finish_reason";  // fixstr of 13 bytes, then the value
  const size_t fr = good.find(key) + key.size();
  ASSERT_EQ(good[fr], static_cast<char>(FinishReason::kAbort));
  std::string bad_reason = good;
  bad_reason[fr] = 0x07;
  StatusOr<FromCoreMessage> d = decode_from_core(bad_reason);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("output.finish_reason: 7 is not a valid value"), std::string::npos)
      << d.status().message();
  const std::string failure = encode_message(FromCoreMessage(EngineCoreFailure{StatusCode::kNotFound, "x"}));
  std::string bad_code = failure;
  const size_t code = failure.find(
                          "\xa4"
                          "code") +
                      5;
  ASSERT_EQ(bad_code[code], static_cast<char>(StatusCode::kNotFound));
  bad_code[code] = 0x00;  // code 0 (OK) is not an error
  StatusOr<FromCoreMessage> f = decode_from_core(bad_code);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("failure.code: 0"), std::string::npos) << f.status().message();
}

// ---- the wire format seen as raw msgpack ----

using Packer = msgpack::packer<msgpack::sbuffer>;

msgpack::object_handle raw(const std::string &bytes) { return msgpack::unpack(bytes.data(), bytes.size()); }

std::vector<std::string> keys(const msgpack::object &map) {
  EXPECT_EQ(map.type, msgpack::type::MAP);
  std::vector<std::string> out;
  for (uint32_t i = 0; i < map.via.map.size; ++i) out.push_back(map.via.map.ptr[i].key.as<std::string>());
  return out;
}

const msgpack::object &at(const msgpack::object &map, const std::string &name) {
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    if (map.via.map.ptr[i].key.as<std::string>() == name) return map.via.map.ptr[i].val;
  }
  ADD_FAILURE() << "no field " << name;
  return map;
}

// Re-packs `o`; in the map reached through `path` (field names), drops `name` and, when `value` is given,
// writes it under `name` instead (a new field when there was none).
void repack(Packer &pk, const msgpack::object &o, const std::vector<std::string> &path, size_t depth,
            const std::string &name, const std::function<void(Packer &)> &value) {
  if (o.type != msgpack::type::MAP) {
    pk.pack(o);
    return;
  }
  const bool here = depth == path.size();
  uint32_t n = 0;
  for (uint32_t i = 0; i < o.via.map.size; ++i) n += !(here && o.via.map.ptr[i].key.as<std::string>() == name);
  pk.pack_map(n + (here && value ? 1 : 0));
  for (uint32_t i = 0; i < o.via.map.size; ++i) {
    const msgpack::object_kv &kv = o.via.map.ptr[i];
    const std::string k = kv.key.as<std::string>();
    if (here && k == name) continue;
    pk.pack(kv.key);
    if (!here && k == path[depth]) {
      repack(pk, kv.val, path, depth + 1, name, value);
    } else {
      pk.pack(kv.val);
    }
  }
  if (here && value) {
    pk.pack(name);
    value(pk);
  }
}

// `message` (encoded) with its body edited as repack() does.
std::string edited(const std::string &message, const std::vector<std::string> &path, const std::string &name,
                   const std::function<void(Packer &)> &value) {
  msgpack::object_handle h = raw(message);
  const msgpack::object *f = h.get().via.array.ptr;
  msgpack::sbuffer buf;
  Packer pk(buf);
  pk.pack_array(3);
  pk.pack(f[0]);
  pk.pack(f[1]);
  repack(pk, f[2], path, 0, name, value);
  return std::string(buf.data(), buf.size());
}

TEST(CodecTest, EveryMessageCarriesTheVersionAndItsTypeTag) {
  Gen g(5);
  const std::vector<std::pair<std::string, int>> messages = {
      {encode_message(ToCoreMessage(random_request(g))), 1},
      {encode_message(ToCoreMessage(AbortRequests{{"a"}})), 2},
      {encode_message(ToCoreMessage(FinishRequestsStopped{{{"a", "stop"}}})), 3},
      {encode_message(ToCoreMessage(ShutdownCore{})), 4},
      {encode_message(FromCoreMessage(EngineCoreReady{})), 11},
      {encode_message(FromCoreMessage(EngineCoreFailure{})), 12},
      {encode_message(FromCoreMessage(random_outputs(g))), 13},
  };
  for (const auto &[bytes, type] : messages) {
    msgpack::object_handle h = raw(bytes);
    ASSERT_EQ(h.get().type, msgpack::type::ARRAY);
    ASSERT_EQ(h.get().via.array.size, 3u);
    EXPECT_EQ(h.get().via.array.ptr[0].as<int32_t>(), kCodecVersion);
    EXPECT_EQ(h.get().via.array.ptr[1].as<int32_t>(), type);
    EXPECT_EQ(h.get().via.array.ptr[2].type, msgpack::type::MAP);
    // Any other version is refused, naming the version.
    std::string other = bytes;
    other[1] = static_cast<char>(kCodecVersion + 1);
    const Status s = type < 10 ? decode_to_core(other).status() : decode_from_core(other).status();
    EXPECT_EQ(s.code(), StatusCode::kDataLoss);
    EXPECT_NE(s.message().find("message.version: " + std::to_string(kCodecVersion + 1)), std::string::npos)
        << s.message();
  }
}

// The field names are the wire contract: every struct is a map with exactly these keys.
TEST(CodecTest, EveryStructIsAMapOfItsFieldNames) {
  using Names = std::vector<std::string>;
  Gen g(6);
  EngineCoreRequest req = random_request(g);
  msgpack::object_handle h = raw(encode_message(ToCoreMessage(req)));
  const msgpack::object &r = h.get().via.array.ptr[2];
  EXPECT_EQ(keys(r), (Names{"request_id", "prompt_token_ids", "sampling_params", "arrival_time", "priority",
                            "eos_token_id", "cache_salt"}));
  EXPECT_EQ(keys(at(r, "sampling_params")), (Names{"n",
                                                   "temperature",
                                                   "top_p",
                                                   "top_k",
                                                   "min_p",
                                                   "seed",
                                                   "max_tokens",
                                                   "min_tokens",
                                                   "stop",
                                                   "stop_token_ids",
                                                   "ignore_eos",
                                                   "include_stop_str_in_output",
                                                   "presence_penalty",
                                                   "frequency_penalty",
                                                   "repetition_penalty",
                                                   "logit_bias",
                                                   "logprobs",
                                                   "prompt_logprobs",
                                                   "skip_special_tokens",
                                                   "spaces_between_special_tokens",
                                                   "structured_outputs"}));
  h = raw(encode_message(ToCoreMessage(AbortRequests{{"a"}})));
  EXPECT_EQ(keys(h.get().via.array.ptr[2]), (Names{"request_ids"}));
  h = raw(encode_message(ToCoreMessage(FinishRequestsStopped{{{"a", "s"}}})));
  EXPECT_EQ(keys(h.get().via.array.ptr[2]), (Names{"stops"}));
  h = raw(encode_message(ToCoreMessage(ShutdownCore{})));
  EXPECT_EQ(keys(h.get().via.array.ptr[2]), Names{});
  h = raw(encode_message(FromCoreMessage(EngineCoreReady{})));
  EXPECT_EQ(keys(h.get().via.array.ptr[2]),
            (Names{"vocab_size", "max_model_len", "scheduling_policy", "model_eos_token_ids"}));
  h = raw(encode_message(FromCoreMessage(EngineCoreFailure{})));
  EXPECT_EQ(keys(h.get().via.array.ptr[2]), (Names{"code", "message"}));
  EngineCoreOutputs outs;
  EngineCoreOutput &o = outs.outputs.emplace_back();
  o.new_logprobs.emplace_back();
  o.events.push_back({EngineCoreEventType::kQueued, 1.0});
  h = raw(encode_message(FromCoreMessage(outs)));
  const msgpack::object &body = h.get().via.array.ptr[2];
  EXPECT_EQ(keys(body), (Names{"outputs", "scheduler_stats", "timestamp"}));
  EXPECT_EQ(keys(at(body, "scheduler_stats")),
            (Names{"num_running_reqs", "num_waiting_reqs", "kv_cache_usage", "prefix_cache_requests",
                   "prefix_cache_queries", "prefix_cache_hits", "num_preemptions"}));
  const msgpack::object &out = at(body, "outputs").via.array.ptr[0];
  EXPECT_EQ(keys(out), (Names{"request_id", "new_token_ids", "new_logprobs", "new_prompt_logprobs", "finish_reason",
                              "stop_reason", "num_cached_tokens", "events"}));
  EXPECT_EQ(keys(at(out, "new_logprobs").via.array.ptr[0]), (Names{"token_ids", "logprobs", "sampled_token_rank"}));
  EXPECT_EQ(keys(at(out, "events").via.array.ptr[0]), (Names{"type", "timestamp"}));
}

TEST(CodecTest, UnknownFieldsAreIgnored) {
  Gen g(7);
  const EngineCoreRequest req = random_request(g);
  const std::string bytes = encode_message(ToCoreMessage(req));
  auto future = [](Packer &pk) {
    pk.pack_array(2);
    pk.pack("a newer peer's field");
    pk.pack(3.5);
  };
  for (const std::vector<std::string> &path : {std::vector<std::string>{}, {"sampling_params"}}) {
    StatusOr<ToCoreMessage> back = decode_to_core(edited(bytes, path, "added_in_a_later_version", future));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    const auto &y = std::get<EngineCoreRequest>(*back);
    EXPECT_EQ(req.request_id, y.request_id);
    EXPECT_EQ(req.prompt_token_ids, y.prompt_token_ids);
    expect_params_eq(req.sampling_params, y.sampling_params);
    EXPECT_EQ(req.eos_token_id, y.eos_token_id);
  }
  const EngineCoreOutputs outs = random_outputs(g);
  StatusOr<FromCoreMessage> back =
      decode_from_core(edited(encode_message(FromCoreMessage(outs)), {"scheduler_stats"}, "num_new_thing", future));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_outputs_eq(outs, std::get<EngineCoreOutputs>(*back));
}

TEST(CodecTest, AMissingOrIllTypedFieldIsNamed) {
  Gen g(8);
  const std::string bytes = encode_message(ToCoreMessage(random_request(g)));
  msgpack::object_handle h = raw(bytes);
  const msgpack::object &body = h.get().via.array.ptr[2];
  auto expect_error = [](const std::string &b, const std::string &expected) {
    StatusOr<ToCoreMessage> m = decode_to_core(b);
    ASSERT_FALSE(m.ok()) << expected;
    EXPECT_EQ(m.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(m.status().message().find(expected), std::string::npos) << m.status().message();
  };
  for (const std::string &name : keys(body))
    expect_error(edited(bytes, {}, name, nullptr), "request." + name + ": missing");
  for (const std::string &name : keys(at(body, "sampling_params"))) {
    expect_error(edited(bytes, {"sampling_params"}, name, nullptr), "sampling_params." + name + ": missing");
  }
  auto str = [](Packer &pk) { pk.pack("not a number"); };
  expect_error(edited(bytes, {}, "priority", str), "request.priority: wrong type or out of range");
  expect_error(edited(bytes, {"sampling_params"}, "temperature", str), "sampling_params.temperature: wrong type");
  expect_error(edited(bytes, {}, "prompt_token_ids", str), "request.prompt_token_ids: expected an array");
  expect_error(edited(bytes, {}, "priority", [](Packer &pk) { pk.pack(int64_t{1} << 40); }),
               "request.priority: wrong type or out of range");
  expect_error(edited(bytes, {}, "sampling_params", [](Packer &pk) { pk.pack_array(0); }),
               "sampling_params: expected a map");
}

}  // namespace
}  // namespace llmserve
