// OpenAI request parsing: one typed reader per field kind, then the fields of each endpoint.
#include "server/protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

namespace llmserve::server {
namespace {

const char *type_name(const OJson &v) {
  switch (v.type()) {
    case OJson::value_t::null:
      return "null";
    case OJson::value_t::boolean:
      return "a boolean";
    case OJson::value_t::string:
      return "a string";
    case OJson::value_t::array:
      return "an array";
    case OJson::value_t::object:
      return "an object";
    case OJson::value_t::number_float:
      return "a float";
    default:
      return "an integer";
  }
}

Status type_error(const std::string &field, const char *expected, const OJson &v) {
  return invalid_argument(field + ": expected " + expected + ", got " + type_name(v));
}

// An integer value: JSON integers, or floats with an integral value (as pydantic's lax mode); never booleans.
Status to_int(const std::string &field, const OJson &v, int64_t lo, int64_t hi, int64_t *out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) return invalid_argument(field + " must be at most " + std::to_string(hi));
    *out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    *out = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return type_error(field, "an integer", v);
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
      return invalid_argument(field + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    }
    *out = static_cast<int64_t>(d);
  } else {
    return type_error(field, "an integer", v);
  }
  if (*out < lo)
    return invalid_argument(field + " must be at least " + std::to_string(lo) + ", got " + std::to_string(*out));
  if (*out > hi)
    return invalid_argument(field + " must be at most " + std::to_string(hi) + ", got " + std::to_string(*out));
  return ok_status();
}

constexpr int64_t kI32Min = std::numeric_limits<int32_t>::min();
constexpr int64_t kI32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// Typed access to the optional fields of one JSON object; absent and null fields are left untouched.
class Fields {
 public:
  explicit Fields(const OJson &body) : body_(body) {}

  const OJson *get(const char *name) const {
    auto it = body_.find(name);
    if (it == body_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  Status read_bool(const char *name, bool *out) const {
    const OJson *v = get(name);
    if (!v) return ok_status();
    if (!v->is_boolean()) return type_error(name, "a boolean", *v);
    *out = v->get<bool>();
    return ok_status();
  }
  Status read_double(const char *name, double *out) const {
    const OJson *v = get(name);
    if (!v) return ok_status();
    if (!v->is_number()) return type_error(name, "a number", *v);
    *out = v->get<double>();
    return ok_status();
  }
  Status read_int32(const char *name, int64_t lo, int64_t hi, int32_t *out) const {
    const OJson *v = get(name);
    if (!v) return ok_status();
    int64_t x = 0;
    RETURN_IF_ERROR(to_int(name, *v, lo, hi, &x));
    *out = static_cast<int32_t>(x);
    return ok_status();
  }
  Status read_int64(const char *name, int64_t lo, int64_t hi, int64_t *out) const {
    const OJson *v = get(name);
    if (!v) return ok_status();
    return to_int(name, *v, lo, hi, out);
  }
  Status read_string(const char *name, std::string *out) const {
    const OJson *v = get(name);
    if (!v) return ok_status();
    if (!v->is_string()) return type_error(name, "a string", *v);
    *out = v->get<std::string>();
    return ok_status();
  }

 private:
  const OJson &body_;
};

Status parse_stop(const Fields &f, SamplingParams *p) {
  const OJson *v = f.get("stop");
  if (!v) return ok_status();
  p->stop.clear();
  if (v->is_string()) {
    p->stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const OJson &s : *v) {
      if (!s.is_string()) return type_error("stop", "a string or a list of strings", s);
      p->stop.push_back(s.get<std::string>());
    }
  } else {
    return type_error("stop", "a string or a list of strings", *v);
  }
  return ok_status();
}

Status parse_stop_token_ids(const Fields &f, SamplingParams *p) {
  const OJson *v = f.get("stop_token_ids");
  if (!v) return ok_status();
  if (!v->is_array()) return type_error("stop_token_ids", "a list of token ids", *v);
  p->stop_token_ids.clear();
  for (const OJson &id : *v) {
    int64_t x = 0;
    RETURN_IF_ERROR(to_int("stop_token_ids", id, 0, kI32Max, &x));
    p->stop_token_ids.push_back(static_cast<int32_t>(x));
  }
  return ok_status();
}

// {"<token id>": bias}: OpenAI keys are token ids as strings.
Status parse_logit_bias(const Fields &f, SamplingParams *p) {
  const OJson *v = f.get("logit_bias");
  if (!v) return ok_status();
  if (!v->is_object()) return type_error("logit_bias", "an object of token id -> bias", *v);
  p->logit_bias.clear();
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string &key = it.key();
    char *end = nullptr;
    errno = 0;
    const long long id = std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id > kI32Max) {
      return invalid_argument("logit_bias: key '" + key + "' is not a token id");
    }
    if (!it.value().is_number()) return type_error("logit_bias", "numbers as values", it.value());
    p->logit_bias.emplace_back(static_cast<int32_t>(id), it.value().get<double>());
  }
  return ok_status();
}

// Fields of both endpoints that exist in this server only as "not supported": silently ignoring them would
// change what the client gets.
Status reject_unsupported(const OJson &body) {
  for (const char *name : {"suffix", "allowed_token_ids", "truncate_prompt_tokens", "bad_words", "logits_processors"}) {
    auto it = body.find(name);
    if (it != body.end() && !it->is_null()) return invalid_argument(std::string(name) + " is not supported");
  }
  auto beam = body.find("use_beam_search");
  if (beam != body.end() && beam->is_boolean() && beam->get<bool>()) {
    return invalid_argument("use_beam_search is not supported");
  }
  return ok_status();
}

// The fields parse_common reads (or refuses with a message of its own, reject_unsupported).
constexpr const char *kCommonFields[] = {
    "model", "n", "best_of", "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "seed", "min_tokens", "stop", "stop_token_ids", "ignore_eos", "include_stop_str_in_output",
    "skip_special_tokens", "spaces_between_special_tokens", "logit_bias", "prompt_logprobs", "priority", "stream",
    "echo", "return_tokens_as_token_ids", "add_special_tokens", "stream_options", "response_format", "use_beam_search",
    "suffix", "allowed_token_ids", "truncate_prompt_tokens", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs", "bad_words", "logits_processors"};
constexpr const char *kCompletionFields[] = {"prompt", "max_tokens", "logprobs"};
constexpr const char *kChatFields[] = {
    "messages", "max_tokens", "max_completion_tokens", "logprobs", "top_logprobs", "add_generation_prompt",
    "continue_final_message", "chat_template", "chat_template_kwargs", "tools", "documents", "tool_choice",
    "functions", "function_call", "modalities"};

// A field that is neither read by the parser nor refused by it with its own message is refused here, naming it:
// nothing the server does not act on is ignored (tests/server walks OpenAI's and vLLM's request schemas).
template <size_t N>
Status reject_unknown_fields(const OJson &body, const char *const (&endpoint_fields)[N]) {
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (it->is_null()) continue;  // null: not set
    const std::string &key = it.key();
    auto known = [&](const auto &list) {
      return std::find_if(std::begin(list), std::end(list), [&](const char *f) { return key == f; }) != std::end(list);
    };
    if (!known(kCommonFields) && !known(endpoint_fields)) {
      return invalid_argument(key + ": this server does not support this field (refused rather than ignored)");
    }
  }
  if (auto so = body.find("stream_options"); so != body.end() && so->is_object()) {
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.key() != "include_usage" && it.key() != "continuous_usage_stats" && !it->is_null()) {
        return invalid_argument("stream_options: " + it.key() + " is not supported");
      }
    }
  }
  return ok_status();
}

Status parse_common(const OJson &body, const SamplingParams &defaults, const ProtocolLimits &limits,
                    GenerationRequest *r) {
  RETURN_IF_ERROR(reject_unsupported(body));
  Fields f(body);
  SamplingParams &p = r->params;
  p = defaults;
  RETURN_IF_ERROR(parse_output_constraint(body, &p.structured_outputs, &r->constraint_field));
  RETURN_IF_ERROR(f.read_string("model", &r->model));
  RETURN_IF_ERROR(f.read_int32("n", 1, limits.max_n, &p.n));
  if (const OJson *b = f.get("best_of")) {
    int64_t best_of = 0;
    RETURN_IF_ERROR(to_int("best_of", *b, 1, limits.max_n, &best_of));
    if (best_of != p.n) return invalid_argument("best_of: only best_of == n is supported");
  }
  RETURN_IF_ERROR(f.read_double("temperature", &p.temperature));
  RETURN_IF_ERROR(f.read_double("top_p", &p.top_p));
  RETURN_IF_ERROR(f.read_int32("top_k", kI32Min, kI32Max, &p.top_k));
  RETURN_IF_ERROR(f.read_double("min_p", &p.min_p));
  RETURN_IF_ERROR(f.read_double("presence_penalty", &p.presence_penalty));
  RETURN_IF_ERROR(f.read_double("frequency_penalty", &p.frequency_penalty));
  RETURN_IF_ERROR(f.read_double("repetition_penalty", &p.repetition_penalty));
  if (const OJson *s = f.get("seed")) {
    int64_t seed = 0;
    RETURN_IF_ERROR(to_int("seed", *s, kI64Min, kI64Max, &seed));
    p.seed = seed;
  }
  RETURN_IF_ERROR(f.read_int64("min_tokens", kI64Min, kI64Max, &p.min_tokens));
  RETURN_IF_ERROR(parse_stop(f, &p));
  RETURN_IF_ERROR(parse_stop_token_ids(f, &p));
  RETURN_IF_ERROR(f.read_bool("ignore_eos", &p.ignore_eos));
  RETURN_IF_ERROR(f.read_bool("include_stop_str_in_output", &p.include_stop_str_in_output));
  RETURN_IF_ERROR(f.read_bool("skip_special_tokens", &p.skip_special_tokens));
  RETURN_IF_ERROR(f.read_bool("spaces_between_special_tokens", &p.spaces_between_special_tokens));
  RETURN_IF_ERROR(parse_logit_bias(f, &p));
  if (const OJson *v = f.get("prompt_logprobs")) {
    int64_t x = 0;
    RETURN_IF_ERROR(to_int("prompt_logprobs", *v, kI32Min, kI32Max, &x));
    p.prompt_logprobs = static_cast<int32_t>(x);
  }
  r->prompt_logprobs_field = p.prompt_logprobs.has_value();
  RETURN_IF_ERROR(f.read_int32("priority", kI32Min, kI32Max, &r->priority));
  RETURN_IF_ERROR(f.read_bool("stream", &r->stream));
  RETURN_IF_ERROR(f.read_bool("echo", &r->echo));
  RETURN_IF_ERROR(f.read_bool("return_tokens_as_token_ids", &r->return_tokens_as_token_ids));
  if (const OJson *v = f.get("add_special_tokens")) {
    if (!v->is_boolean()) return type_error("add_special_tokens", "a boolean", *v);
    r->add_special_tokens = v->get<bool>();
  }
  if (const OJson *so = f.get("stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object", *so);
    if (!r->stream) return invalid_argument("stream_options can only be set when stream is true");
    Fields sf(*so);
    RETURN_IF_ERROR(sf.read_bool("include_usage", &r->include_usage).with_context("stream_options"));
    RETURN_IF_ERROR(sf.read_bool("continuous_usage_stats", &r->continuous_usage_stats).with_context("stream_options"));
  }
  return ok_status();
}

// One prompt of token ids: every id in [0, vocab_size).
Status parse_id_prompt(const OJson &list, const ProtocolLimits &limits, std::vector<int32_t> *ids) {
  if (list.empty()) return invalid_argument("prompt: a token-id prompt cannot be empty");
  for (const OJson &id : list) {
    int64_t x = 0;
    RETURN_IF_ERROR(to_int("prompt", id, 0, kI32Max, &x));
    if (limits.vocab_size > 0 && x >= limits.vocab_size) {
      return invalid_argument("prompt: token id " + std::to_string(x) + " is outside the vocabulary (" +
                              std::to_string(limits.vocab_size) + ")");
    }
    ids->push_back(static_cast<int32_t>(x));
  }
  return ok_status();
}

Status parse_prompts(const OJson &body, const ProtocolLimits &limits, std::vector<PromptInput> *prompts) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return invalid_argument("prompt is required");
  const OJson &v = *it;
  if (v.is_string()) {
    prompts->push_back(PromptInput{v.get<std::string>(), {}});
    return ok_status();
  }
  if (!v.is_array()) return type_error("prompt", "a string, a list of strings, token ids or lists of token ids", v);
  if (v.empty()) return invalid_argument("prompt: the list of prompts cannot be empty");
  if (v.size() > limits.max_prompts) {
    return invalid_argument("prompt: at most " + std::to_string(limits.max_prompts) + " prompts per request");
  }
  if (v[0].is_number()) {
    PromptInput p;
    RETURN_IF_ERROR(parse_id_prompt(v, limits, &p.token_ids));
    prompts->push_back(std::move(p));
    return ok_status();
  }
  for (const OJson &item : v) {
    if (item.is_string()) {
      prompts->push_back(PromptInput{item.get<std::string>(), {}});
    } else if (item.is_array()) {
      PromptInput p;
      RETURN_IF_ERROR(parse_id_prompt(item, limits, &p.token_ids));
      prompts->push_back(std::move(p));
    } else {
      return type_error("prompt", "strings or lists of token ids in the list", item);
    }
  }
  return ok_status();
}

// Chat message content: a string, null, or a list of {"type": "text", "text": ...} parts joined with "\n".
Status normalize_messages(const OJson &v, OJson *out) {
  if (!v.is_array()) return type_error("messages", "a list of messages", v);
  if (v.empty()) return invalid_argument("messages: at least one message is required");
  *out = OJson::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const OJson &m = v[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return invalid_argument("messages: " + where + " is not an object");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return invalid_argument("messages: " + where + ".role must be a string");
    }
    OJson msg = m;
    auto content = m.find("content");
    if (content != m.end() && content->is_array()) {
      std::string text;
      for (const OJson &part : *content) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string()) {
          return invalid_argument("messages: " + where + ".content: only parts of type \"text\" are supported");
        }
        if (!text.empty()) text += "\n";
        text += part["text"].get<std::string>();
      }
      msg["content"] = text;
    } else if (content != m.end() && !content->is_string() && !content->is_null()) {
      return invalid_argument("messages: " + where + ".content must be a string, a list of parts or null");
    }
    out->push_back(std::move(msg));
  }
  return ok_status();
}

}  // namespace

StatusOr<OJson> parse_json_object(const std::string &body) {
  OJson j = OJson::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return invalid_argument("the request body is not valid JSON");
  if (!j.is_object()) return invalid_argument("the request body must be a JSON object");
  return j;
}

std::string param_of(const std::string &message) {
  size_t n = 0;
  while (n < message.size() && (std::islower(static_cast<unsigned char>(message[n])) || message[n] == '_')) ++n;
  if (n == 0 || n == message.size() || (message[n] != ' ' && message[n] != ':')) return "";
  return message.substr(0, n);
}

StatusOr<CompletionRequest> parse_completion_request(const OJson &body, const SamplingParams &defaults,
                                                     const ProtocolLimits &limits) {
  CompletionRequest r;
  RETURN_IF_ERROR(reject_unknown_fields(body, kCompletionFields));
  RETURN_IF_ERROR(parse_common(body, defaults, limits, &r));
  Fields f(body);
  // Completions default to 16 tokens (OpenAI); null means "until max_model_len".
  r.params.max_tokens = 16;
  if (auto it = body.find("max_tokens"); it != body.end()) {
    if (it->is_null()) {
      r.params.max_tokens.reset();
    } else {
      int64_t x = 0;
      RETURN_IF_ERROR(to_int("max_tokens", *it, kI64Min, kI64Max, &x));
      r.params.max_tokens = x;
    }
  }
  if (const OJson *v = f.get("logprobs")) {
    int64_t x = 0;
    RETURN_IF_ERROR(to_int("logprobs", *v, kI32Min, kI32Max, &x));
    r.params.logprobs = static_cast<int32_t>(x);
  }
  RETURN_IF_ERROR(parse_prompts(body, limits, &r.prompts));
  if (r.echo && r.params.logprobs) {
    // As vLLM: the echoed prompt's tokens lead the choice's logprobs, scored with the same number of alternatives.
    r.params.prompt_logprobs = std::max(r.params.prompt_logprobs.value_or(0), *r.params.logprobs);
  }
  RETURN_IF_ERROR(r.params.validate(limits.vocab_size));
  return r;
}

StatusOr<ChatRequest> parse_chat_request(const OJson &body, const SamplingParams &defaults,
                                         const ProtocolLimits &limits) {
  ChatRequest r;
  RETURN_IF_ERROR(reject_unknown_fields(body, kChatFields));
  RETURN_IF_ERROR(parse_common(body, defaults, limits, &r));
  Fields f(body);
  auto messages = body.find("messages");
  if (messages == body.end() || messages->is_null()) return invalid_argument("messages is required");
  RETURN_IF_ERROR(normalize_messages(*messages, &r.messages));
  // Chat: max_completion_tokens (new name) wins over max_tokens; neither means "until max_model_len".
  r.params.max_tokens.reset();
  for (const char *name : {"max_tokens", "max_completion_tokens"}) {
    if (const OJson *v = f.get(name)) {
      int64_t x = 0;
      RETURN_IF_ERROR(to_int(name, *v, kI64Min, kI64Max, &x));
      if (x < 1) return invalid_argument(std::string(name) + " must be at least 1, got " + std::to_string(x) + ".");
      r.params.max_tokens = x;
    }
  }
  RETURN_IF_ERROR(f.read_bool("logprobs", &r.logprobs));
  if (const OJson *v = f.get("top_logprobs")) {
    int64_t x = 0;
    RETURN_IF_ERROR(to_int("top_logprobs", *v, 0, SamplingParams::kMaxLogprobs, &x));
    if (!r.logprobs) return invalid_argument("top_logprobs: logprobs must be true when top_logprobs is set");
    r.params.logprobs = static_cast<int32_t>(x);
  } else if (r.logprobs) {
    r.params.logprobs = 0;
  }
  RETURN_IF_ERROR(f.read_bool("add_generation_prompt", &r.add_generation_prompt));
  RETURN_IF_ERROR(f.read_bool("continue_final_message", &r.continue_final_message));
  if (r.continue_final_message && r.add_generation_prompt) {
    return invalid_argument(
        "continue_final_message: cannot be true together with add_generation_prompt (set it to false)");
  }
  if (r.continue_final_message && r.messages.back().value("role", "") != "assistant") {
    return invalid_argument("continue_final_message: the final message must have role \"assistant\"");
  }
  if (const OJson *v = f.get("chat_template")) {
    if (!v->is_string()) return type_error("chat_template", "a string", *v);
    r.chat_template = v->get<std::string>();
  }
  if (const OJson *v = f.get("chat_template_kwargs")) {
    if (!v->is_object()) return type_error("chat_template_kwargs", "an object", *v);
    r.chat_template_kwargs = *v;
  }
  ToolsRequest tools;
  RETURN_IF_ERROR(parse_tools(body, &tools));
  r.tools = std::move(tools.tools);
  r.tool_choice = tools.choice;
  r.named_tool = tools.named_function;
  if (const OJson *v = f.get("documents")) {
    if (!v->is_array()) return type_error("documents", "a list", *v);
    r.documents = *v;
  }
  // "required" / a named function: the output is constrained to the tool-call JSON (vLLM's schema), which leaves no
  // room for another constraint.
  if (r.tool_choice == ToolChoice::kRequired || r.tool_choice == ToolChoice::kNamed) {
    if (r.params.structured_outputs) {
      return invalid_argument("tool_choice: a required or named tool_choice cannot be combined with " +
                              r.constraint_field);
    }
    ToolsRequest t{r.tools, r.tool_choice, r.named_tool};
    r.params.structured_outputs = tool_call_constraint(t);
    r.constraint_field = "tools";
  }
  for (const char *legacy : {"functions", "function_call"}) {
    if (f.get(legacy) != nullptr) {
      return invalid_argument(std::string(legacy) + ": function calling is not supported (nor its tools form yet)");
    }
  }
  if (const OJson *v = f.get("modalities")) {
    if (!v->is_array() || *v != OJson::array({"text"})) {
      return invalid_argument("modalities: only [\"text\"] is supported");
    }
  }
  RETURN_IF_ERROR(r.params.validate(limits.vocab_size));
  return r;
}

}  // namespace llmserve::server
