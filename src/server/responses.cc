// Response JSON building blocks.
#include "server/responses.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace llmserve::server {
namespace {

double clamp_logprob(float lp) {
  if (std::isnan(lp)) return -9999.0;
  return std::max(static_cast<double>(lp), -9999.0);
}

OJson utf8_bytes(const std::string &s) {
  OJson out = OJson::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

const char *finish_reason_json(FinishReason reason) { return finish_reason_name(reason); }

OJson stop_reason_json(const StopReason &reason) {
  if (const int32_t *id = std::get_if<int32_t>(&reason)) return *id;
  if (const std::string *s = std::get_if<std::string>(&reason)) return *s;
  return nullptr;
}

OJson completion_logprobs(const std::vector<int32_t> &ids, const std::vector<TokenLogprobs> &logprobs,
                          const TokenNamer &namer, size_t *offset) {
  OJson text_offset = OJson::array(), token_logprobs = OJson::array(), tokens = OJson::array(), top = OJson::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string tok = namer(ids[i]);
    tokens.push_back(tok);
    text_offset.push_back(*offset);
    *offset += tok.size();
    if (i >= logprobs.size() || logprobs[i].logprobs.empty()) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    const TokenLogprobs &lp = logprobs[i];
    token_logprobs.push_back(clamp_logprob(lp.logprobs[0]));
    OJson alternatives = OJson::object();
    for (size_t k = 0; k < lp.token_ids.size() && k < lp.logprobs.size(); ++k) {
      alternatives[namer(lp.token_ids[k])] = clamp_logprob(lp.logprobs[k]);
    }
    top.push_back(std::move(alternatives));
  }
  return OJson{{"text_offset", std::move(text_offset)},
               {"token_logprobs", std::move(token_logprobs)},
               {"tokens", std::move(tokens)},
               {"top_logprobs", std::move(top)}};
}

OJson chat_logprobs(const std::vector<int32_t> &ids, const std::vector<TokenLogprobs> &logprobs,
                    const TokenNamer &namer, int32_t top_k) {
  OJson content = OJson::array();
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string tok = namer(ids[i]);
    OJson entry = {{"token", tok}, {"logprob", -9999.0}, {"bytes", utf8_bytes(tok)}, {"top_logprobs", OJson::array()}};
    if (i < logprobs.size() && !logprobs[i].logprobs.empty()) {
      const TokenLogprobs &lp = logprobs[i];
      entry["logprob"] = clamp_logprob(lp.logprobs[0]);
      // Entry 0 is the sampled token; 1..top_k are the most likely ones in rank order.
      for (size_t k = 1; k < lp.token_ids.size() && k < lp.logprobs.size() && static_cast<int32_t>(k) <= top_k; ++k) {
        const std::string alt = namer(lp.token_ids[k]);
        entry["top_logprobs"].push_back(
            OJson{{"token", alt}, {"logprob", clamp_logprob(lp.logprobs[k])}, {"bytes", utf8_bytes(alt)}});
      }
    }
    content.push_back(std::move(entry));
  }
  return OJson{{"content", std::move(content)}};
}

OJson prompt_logprobs_json(const std::vector<std::optional<TokenLogprobs>> &positions, const TokenNamer &namer) {
  OJson out = OJson::array();
  for (const std::optional<TokenLogprobs> &pos : positions) {
    if (!pos || pos->token_ids.empty() || pos->logprobs.empty()) {
      out.push_back(nullptr);
      continue;
    }
    OJson entry = OJson::object();
    for (size_t k = 0; k < pos->token_ids.size() && k < pos->logprobs.size(); ++k) {
      const std::string key = std::to_string(pos->token_ids[k]);
      if (entry.contains(key)) continue;  // the prompt token is also among the top-k
      const int64_t rank = k == 0 ? pos->sampled_token_rank : static_cast<int64_t>(k);
      entry[key] = OJson{{"logprob", clamp_logprob(pos->logprobs[k])},
                         {"rank", rank},
                         {"decoded_token", namer(pos->token_ids[k])}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

OJson usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return OJson{{"prompt_tokens", prompt_tokens},
               {"total_tokens", prompt_tokens + completion_tokens},
               {"completion_tokens", completion_tokens}};
}

OJson completion_envelope(const std::string &id, const char *object, int64_t created, const std::string &model,
                          OJson choices) {
  return OJson{{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
}

std::string random_id(const std::string &prefix) {
  thread_local std::mt19937_64 gen(std::random_device{}());
  static const char *kHex = "0123456789abcdef";
  std::string out = prefix + "-";
  for (int i = 0; i < 2; ++i) {
    uint64_t v = gen();
    for (int j = 0; j < 16; ++j, v >>= 4) out += kHex[v & 15];
  }
  return out;
}

}  // namespace llmserve::server
