// Post-processors of HF `tokenizers` for single sequences: TemplateProcessing, BertProcessing,
// RobertaProcessing, ByteLevel (ids unchanged) and Sequence. They only add special-token ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_util.h"

namespace llmserve {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Wraps `ids` of one sequence with the special tokens the model expects.
  virtual void process(std::vector<int32_t>& ids) const = 0;
};

StatusOr<std::unique_ptr<PostProcessor>> make_post_processor(const json_util::Json& j, const std::string& path);

// TemplateProcessing built directly: `prefix` ids, the sequence, then `suffix` ids.
std::unique_ptr<PostProcessor> make_wrap_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix);

}  // namespace llmserve
