// What transformers 5's AutoTokenizer changes on top of tokenizer.json (the pipeline vLLM users get): the
// tokenizer class it picks and the components that class rebuilds. Pure JSON -> JSON; no I/O.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/json_util.h"

namespace llmserve {

// Which pipeline a Tokenizer reproduces. kTransformers (the default) is transformers 5's AutoTokenizer;
// kHfTokenizers is tokenizer.json exactly as the `tokenizers` library runs it.
enum class TokenizerPipeline { kTransformers, kHfTokenizers };

// "transformers" | "tokenizers"; false for anything else.
bool parse_tokenizer_pipeline(std::string_view name, TokenizerPipeline* out);

// The class AutoTokenizer.from_pretrained instantiates, without the "Fast" suffix, from tokenizer_config.json's
// tokenizer_class and config.json's model_type (empty when there is no config.json): "TokenizersBackend"
// when transformers ignores the configured class for that model type.
std::string transformers_tokenizer_class(const json_util::Json& tokenizer_config, std::string_view model_type);

// tokenizer.json with the components transformers 5's class `cls` rebuilds in its constructor replaced
// (LlamaTokenizer: no normalizer, Metaspace pre-tokenizer with transformers' prepend scheme, its decoder).
json_util::Json apply_transformers_class(json_util::Json tokenizer_json, const json_util::Json& tokenizer_config,
                                         std::string_view cls);

}  // namespace llmserve
