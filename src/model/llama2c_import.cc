// llama2.c -> HF conversion. Weights: llama2.c stores [out, in] matrices like HF, but rotates interleaved
// (even, odd) pairs where HF Llama rotates halves, so q/k rows are permuted per head (as HF's own Llama
// converter does). Tokenizer: SentencePiece-style BPE whose merge ranks follow the merged piece's score, the
// rule llama2.c's encoder applies.
#include "model/llama2c_import.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/safetensors.h"

namespace llmserve {
namespace {

using json = nlohmann::ordered_json;

struct Llama2cHeader {
  int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

StatusOr<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) return internal_error("cannot write " + path.string());
  return ok_status();
}

// Reorders the rows of a [n_heads * head_size, dim] projection from interleaved-pair to rotate-half order.
Tensor permute_for_rotate_half(const Tensor& w, int64_t n_heads) {
  const int64_t rows = w.size(0), cols = w.size(1), hs = rows / n_heads;
  Tensor out = Tensor::empty({rows, cols}, DType::kF32);
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t j = 0; j < hs; ++j) {
      const int64_t src = h * hs + (j < hs / 2 ? 2 * j : 2 * (j - hs / 2) + 1);
      std::memcpy(out.data<float>() + (h * hs + j) * cols, w.data<float>() + src * cols, cols * sizeof(float));
    }
  }
  return out;
}

Status convert_weights(const Llama2cImportOptions& opt, const std::string& data, const Llama2cHeader& h,
                       bool shared_classifier) {
  const int64_t dim = h.dim, hidden = h.hidden_dim, layers = h.n_layers, vocab = std::abs(h.vocab_size);
  const int64_t head_size = dim / h.n_heads, kv_dim = h.n_kv_heads * head_size;
  size_t offset = sizeof(Llama2cHeader);
  auto take = [&](Shape shape) -> StatusOr<Tensor> {
    Tensor t = Tensor::empty(std::move(shape), DType::kF32);
    if (offset + t.nbytes() > data.size()) {
      return data_loss(opt.checkpoint_path + ": truncated (need " + std::to_string(offset + t.nbytes()) +
                       " bytes, file has " + std::to_string(data.size()) + ")");
    }
    std::memcpy(t.raw_data(), data.data() + offset, t.nbytes());
    offset += t.nbytes();
    return t;
  };
  std::vector<std::pair<std::string, Tensor>> out;
  ASSIGN_OR_RETURN(Tensor embed, take({vocab, dim}));
  out.emplace_back("model.embed_tokens.weight", embed);
  // Per-layer weights are stored grouped by kind across all layers.
  auto per_layer = [&](const std::string& suffix, Shape shape, int64_t permute_heads) -> Status {
    for (int64_t l = 0; l < layers; ++l) {
      ASSIGN_OR_RETURN(Tensor t, take(shape));
      if (permute_heads > 0) t = permute_for_rotate_half(t, permute_heads);
      out.emplace_back("model.layers." + std::to_string(l) + "." + suffix, t);
    }
    return ok_status();
  };
  RETURN_IF_ERROR(per_layer("input_layernorm.weight", {dim}, 0));
  RETURN_IF_ERROR(per_layer("self_attn.q_proj.weight", {dim, dim}, h.n_heads));
  RETURN_IF_ERROR(per_layer("self_attn.k_proj.weight", {kv_dim, dim}, h.n_kv_heads));
  RETURN_IF_ERROR(per_layer("self_attn.v_proj.weight", {kv_dim, dim}, 0));
  RETURN_IF_ERROR(per_layer("self_attn.o_proj.weight", {dim, dim}, 0));
  RETURN_IF_ERROR(per_layer("post_attention_layernorm.weight", {dim}, 0));
  RETURN_IF_ERROR(per_layer("mlp.gate_proj.weight", {hidden, dim}, 0));
  RETURN_IF_ERROR(per_layer("mlp.down_proj.weight", {dim, hidden}, 0));
  RETURN_IF_ERROR(per_layer("mlp.up_proj.weight", {hidden, dim}, 0));
  ASSIGN_OR_RETURN(Tensor final_norm, take({dim}));
  out.emplace_back("model.norm.weight", final_norm);
  offset += 2 * static_cast<size_t>(h.seq_len) * (head_size / 2) * sizeof(float);  // freq_cis tables: unused
  if (!shared_classifier) {
    ASSIGN_OR_RETURN(Tensor cls, take({vocab, dim}));
    out.emplace_back("lm_head.weight", cls);
  }
  if (offset != data.size()) {
    return invalid_argument(opt.checkpoint_path + ": " + std::to_string(data.size() - std::min(offset, data.size())) +
                            " unexpected trailing bytes (not a llama2.c v0 checkpoint?)");
  }
  return write_safetensors((std::filesystem::path(opt.out_dir) / "model.safetensors").string(), out,
                           {{"format", "pt"}});
}

struct Piece {
  std::string text;
  float score;
};

StatusOr<std::vector<Piece>> read_tokenizer(const std::string& path, int64_t vocab_size) {
  ASSIGN_OR_RETURN(std::string data, read_file(path));
  size_t off = 4;  // max_token_length (unused)
  std::vector<Piece> pieces;
  for (int64_t i = 0; i < vocab_size; ++i) {
    float score;
    int32_t len;
    if (off + 8 > data.size()) return data_loss(path + ": truncated at token " + std::to_string(i));
    std::memcpy(&score, data.data() + off, 4);
    std::memcpy(&len, data.data() + off + 4, 4);
    off += 8;
    if (len < 0 || off + static_cast<size_t>(len) > data.size()) {
      return data_loss(path + ": bad length for token " + std::to_string(i));
    }
    pieces.push_back({data.substr(off, len), score});
    off += len;
  }
  return pieces;
}

// Builds tokenizer.json in the layout of HF's Llama-2 tokenizer (normalizer prepends/replaces "▁", BPE with
// byte fallback, decoder Replace + ByteFallback + Fuse + Strip).
json make_tokenizer_json(std::vector<Piece> pieces) {
  const std::string kSpace = "\xe2\x96\x81";  // "▁"
  pieces[0].text = "<unk>";
  pieces[1].text = "<s>";
  pieces[2].text = "</s>";
  json vocab = json::object();
  std::map<std::string, int64_t> id_of;
  for (size_t i = 0; i < pieces.size(); ++i) {
    std::string t = pieces[i].text;
    if (i >= 3) {  // llama2.c stored "▁" as a space
      std::string r;
      for (char ch : t) r += ch == ' ' ? kSpace : std::string(1, ch);
      t = r;
      pieces[i].text = t;
    }
    vocab[t] = static_cast<int64_t>(i);
    id_of.emplace(t, static_cast<int64_t>(i));
  }
  // Merges: every split of a non-byte piece into two vocabulary pieces, ranked by the merged piece's score
  // (higher first), then by the left and right ids.
  struct Merge {
    float score;
    int64_t merged, left, right;
  };
  std::vector<Merge> merges;
  for (size_t i = 3 + 256; i < pieces.size(); ++i) {
    const std::string& t = pieces[i].text;
    for (size_t cut = 1; cut < t.size(); ++cut) {
      auto a = id_of.find(t.substr(0, cut)), b = id_of.find(t.substr(cut));
      if (a != id_of.end() && b != id_of.end() && a->second >= 3 && b->second >= 3) {
        merges.push_back({pieces[i].score, static_cast<int64_t>(i), a->second, b->second});
      }
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.left != y.left) return x.left < y.left;
    return x.right < y.right;
  });
  json merge_list = json::array();
  for (const Merge& m : merges) merge_list.push_back(json::array({pieces[m.left].text, pieces[m.right].text}));

  auto special = [](int id, const std::string& content) {
    return json{{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
                {"rstrip", false},    {"normalized", false}, {"special", true}};
  };
  json tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = json::array({special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")});
  tok["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", kSpace}},
                                                    json{{"type", "Replace"},
                                                         {"pattern", {{"String", " "}}},
                                                         {"content", kSpace}}})}};
  tok["pre_tokenizer"] = nullptr;
  json bos_piece = {{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}};
  tok["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({bos_piece, json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"pair", json::array({bos_piece, json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                            json{{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                            json{{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
      {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", json::array({1})}, {"tokens", json::array({"<s>"})}}}}}};
  tok["decoder"] = {{"type", "Sequence"},
                    {"decoders", json::array({json{{"type", "Replace"}, {"pattern", {{"String", kSpace}}}, {"content", " "}},
                                              json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                              json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  tok["model"] = {{"type", "BPE"},          {"dropout", nullptr},   {"unk_token", "<unk>"},
                  {"continuing_subword_prefix", nullptr},             {"end_of_word_suffix", nullptr},
                  {"fuse_unk", true},       {"byte_fallback", true}, {"ignore_merges", false},
                  {"vocab", vocab},         {"merges", merge_list}};
  return tok;
}

}  // namespace

Status import_llama2c(const Llama2cImportOptions& opt) {
  ASSIGN_OR_RETURN(std::string data, read_file(opt.checkpoint_path));
  Llama2cHeader h;
  if (data.size() < sizeof(h)) return data_loss(opt.checkpoint_path + ": shorter than the 28-byte header");
  std::memcpy(&h, data.data(), sizeof(h));
  if (h.dim <= 0 || h.hidden_dim <= 0 || h.n_layers <= 0 || h.n_heads <= 0 || h.n_kv_heads <= 0 ||
      h.vocab_size == 0 || h.seq_len <= 0 || h.dim % h.n_heads != 0 || h.n_heads % h.n_kv_heads != 0 ||
      (h.dim / h.n_heads) % 2 != 0) {
    return invalid_argument(opt.checkpoint_path + ": implausible llama2.c header (dim " + std::to_string(h.dim) +
                            ", heads " + std::to_string(h.n_heads) + ", kv heads " + std::to_string(h.n_kv_heads) +
                            ", vocab " + std::to_string(h.vocab_size) + ")");
  }
  const bool shared_classifier = h.vocab_size > 0;
  const int64_t vocab = std::abs(h.vocab_size);
  std::error_code ec;
  std::filesystem::create_directories(opt.out_dir, ec);
  if (ec) return internal_error("cannot create " + opt.out_dir + ": " + ec.message());
  RETURN_IF_ERROR(convert_weights(opt, data, h, shared_classifier));

  json config = {{"architectures", json::array({"LlamaForCausalLM"})},
                 {"model_type", "llama"},
                 {"hidden_size", h.dim},
                 {"intermediate_size", h.hidden_dim},
                 {"num_hidden_layers", h.n_layers},
                 {"num_attention_heads", h.n_heads},
                 {"num_key_value_heads", h.n_kv_heads},
                 {"vocab_size", vocab},
                 {"max_position_embeddings", h.seq_len},
                 {"rms_norm_eps", opt.rms_norm_eps},
                 {"rope_theta", opt.rope_theta},
                 {"hidden_act", "silu"},
                 {"tie_word_embeddings", shared_classifier},
                 {"bos_token_id", 1},
                 {"eos_token_id", 2},
                 {"torch_dtype", "float32"}};
  const std::filesystem::path dir(opt.out_dir);
  RETURN_IF_ERROR(write_text(dir / "config.json", config.dump(2)));

  ASSIGN_OR_RETURN(std::vector<Piece> pieces, read_tokenizer(opt.tokenizer_path, vocab));
  if (vocab < 3 + 256) return invalid_argument(opt.tokenizer_path + ": vocabulary too small for byte fallback");
  RETURN_IF_ERROR(write_text(dir / "tokenizer.json", make_tokenizer_json(std::move(pieces)).dump(1)));
  json tok_config = {{"add_bos_token", true},   {"add_eos_token", false}, {"bos_token", "<s>"},
                     {"eos_token", "</s>"},     {"unk_token", "<unk>"},   {"pad_token", nullptr},
                     {"model_max_length", h.seq_len}, {"tokenizer_class", "LlamaTokenizerFast"},
                     {"legacy", true}};
  return write_text(dir / "tokenizer_config.json", tok_config.dump(2));
}

}  // namespace llmserve
