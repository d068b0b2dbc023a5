// Built-in default: config and tokenizer JSON for the tiny in-memory model (weights come from the dummy loader).
#include "cli/builtin_default.h"

#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"

namespace llmserve::cli {

std::string builtin_default_config_json() {
  nlohmann::ordered_json config = {{"architectures", {"LlamaForCausalLM"}},
                                   {"model_type", "llama"},
                                   {"vocab_size", 258},
                                   {"hidden_size", 64},
                                   {"intermediate_size", 128},
                                   {"num_hidden_layers", 2},
                                   {"num_attention_heads", 4},
                                   {"num_key_value_heads", 2},
                                   {"max_position_embeddings", 512},
                                   {"rms_norm_eps", 1e-5},
                                   {"rope_theta", 10000.0},
                                   {"hidden_act", "silu"},
                                   {"tie_word_embeddings", false},
                                   {"bos_token_id", 256},
                                   {"eos_token_id", 257},
                                   {"torch_dtype", "float32"}};
  return config.dump();
}

const char *builtin_default_chat_template() {
  return "{{ bos_token }}{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}assistant:{% endif %}";
}

std::string builtin_default_tokenizer_json() {
  // One token per byte, spelled with GPT-2's printable stand-ins (the ByteLevel pre-tokenizer's own table).
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
  auto special = [](int id, const char* content) {
    return nlohmann::ordered_json{{"id", id},         {"content", content}, {"single_word", false},
                                  {"lstrip", false},  {"rstrip", false},    {"normalized", false},
                                  {"special", true}};
  };
  nlohmann::ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", {special(256, "<|begin_of_text|>"), special(257, "<|end_of_text|>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true},
                         {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"pair", {{{"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{"<|begin_of_text|>", {{"id", "<|begin_of_text|>"}, {"ids", {256}}, {"tokens", {"<|begin_of_text|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
      {"model", {{"type", "BPE"},
                 {"dropout", nullptr},
                 {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr},
                 {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false},
                 {"byte_fallback", false},
                 {"ignore_merges", false},
                 {"vocab", vocab},
                 {"merges", nlohmann::ordered_json::array()}}}};
  return tok.dump();
}

}  // namespace llmserve::cli
