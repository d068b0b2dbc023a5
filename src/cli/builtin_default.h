// The built-in default model that `llmserve generate` runs without --model: a tiny Llama with seeded random
// weights and a byte-level tokenizer, both made in memory, so the main job runs on any fresh machine.
#pragma once

#include <string>



namespace llmserve::cli {

// The default model's config.json contents.
std::string builtin_default_config_json();
// A byte-level BPE tokenizer.json (256 byte tokens, no merges, <|begin_of_text|> / <|end_of_text|>).
std::string builtin_default_tokenizer_json();
// Its chat template (the tokenizer has none): "role: content" lines, then "assistant:".
const char *builtin_default_chat_template();

}  // namespace llmserve::cli
