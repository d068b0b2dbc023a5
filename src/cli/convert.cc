// `llmserve convert llama2c`: turns a llama2.c checkpoint + tokenizer into a Hugging Face model directory.
#include <cstdio>

#include "cli/command.h"
#include "model/llama2c_import.h"

namespace llmserve::cli {
namespace {

int run_convert(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != "llama2c") {
    const bool help = args.size() == 1 && (args[0] == "--help" || args[0] == "-h");
    if (!args.empty() && !help) {  // say which format is unknown before the usage line
      std::fprintf(stderr, "error: convert %s: not supported (the only format is llama2c; GGUF is not read yet)\n",
                   args[0].c_str());
    }
    std::fprintf(help ? stdout : stderr,
                 "usage: llmserve convert llama2c --checkpoint X.bin --tokenizer tok.bin --out DIR\n");
    return help ? 0 : 2;
  }
  Llama2cImportOptions options;
  ArgParser parser("convert llama2c",
                   "Writes a Hugging Face model directory (config.json, model.safetensors, tokenizer.json,\n"
                   "tokenizer_config.json) from a llama2.c checkpoint and its tokenizer.bin.");
  parser.add_string("checkpoint", &options.checkpoint_path, "llama2.c model file (.bin)");
  parser.add_string("tokenizer", &options.tokenizer_path, "llama2.c tokenizer file (tokenizer.bin)");
  parser.add_string("out", &options.out_dir, "output directory (created if missing)");
  if (int code = parse_or_exit_code(parser, {args.begin() + 1, args.end()}); code >= 0) return code;
  if (options.checkpoint_path.empty() || options.tokenizer_path.empty() || options.out_dir.empty()) {
    std::fprintf(stderr, "error: --checkpoint, --tokenizer and --out are required\n");
    return 2;
  }
  Status status = import_llama2c(options);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", status.message().c_str());
    return 1;
  }
  std::printf("wrote %s\n", options.out_dir.c_str());
  return 0;
}

}  // namespace

LLMSERVE_REGISTER_COMMAND("convert", "convert a llama2.c checkpoint into a Hugging Face model directory",
                          run_convert);

}  // namespace llmserve::cli
