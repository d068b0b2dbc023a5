// Converts a llama2.c checkpoint (legacy v0 .bin) and its tokenizer.bin into a standard Hugging Face model
// directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json), so such models load
// through the normal checkpoint path.
#pragma once

#include <string>

#include "core/status.h"

namespace llmserve {

struct Llama2cImportOptions {
  std::string checkpoint_path;  // llama2.c model .bin
  std::string tokenizer_path;   // llama2.c tokenizer .bin (vocab with scores)
  std::string out_dir;          // created if missing
  double rms_norm_eps = 1e-5;   // llama2.c's constant
  double rope_theta = 10000.0;  // llama2.c's constant
};

// Errors (truncated or inconsistent files, unwritable output) name the file and what was wrong.
Status import_llama2c(const Llama2cImportOptions& options);

}  // namespace llmserve
