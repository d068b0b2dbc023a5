// Structured output through LLMEngine on the CPU (real ModelRunner, Sampler and grammar engine over a byte tokenizer
// on the llama_gqa_f32 fixture, sampled at temperature 1): constrained requests (regex, choice, JSON schema,
// json_object, n > 1) mixed with unconstrained ones, under chunked prefill, prefix caching, preemption storms and async
// scheduling (deferred sampling: the forward runs before the bitmask is known). Oracles: std::regex / nlohmann / the choice list on every finished output; seeded unconstrained requests
// give the same tokens with or without constrained neighbours (the mask never leaks to another row); async equals
// sync; no KV block is left behind.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "frontend/llm_engine.h"
#include "test_models.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace llmserve {
namespace {

CausalLM &model() {
  static std::unique_ptr<CausalLM> m = testing::load_model_or_die(testing::fixtures_dir() + "/llama_gqa_f32");
  return *m;
}

// A byte-level BPE tokenizer over the fixture's 256 ids: id b is byte b, except 1 and 2, which are the model's BOS
// and EOS (config.json) as special tokens.
const Tokenizer &tokenizer() {
  static std::unique_ptr<Tokenizer> tok = [] {
    nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
    for (int b = 0; b < 256; ++b) {
      if (b != 1 && b != 2) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
    }
    auto special = [](int id, const char *content) {
      return nlohmann::ordered_json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                                    {"rstrip", false}, {"normalized", false}, {"special", true}};
    };
    nlohmann::ordered_json j = {
        {"version", "1.0"},
        {"added_tokens", {special(1, "<s>"), special(2, "</s>")}},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model",
         {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", nullptr},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", false},
          {"vocab", vocab},
          {"merges", nlohmann::ordered_json::array()}}}};
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::from_json(j.dump());
    CHECK(t.ok()) << t.status().to_string();
    return std::move(*t);
  }();
  return *tok;
}

std::unique_ptr<LLMEngine> make_engine(bool async, EngineArgs args = {}) {
  args.async_scheduling = async;
  StatusOr<std::unique_ptr<LLMEngine>> e = LLMEngine::create(model(), &tokenizer(), args);
  CHECK(e.ok()) << e.status().to_string();
  return std::move(*e);
}

struct Case {
  std::string id;
  SamplingParams params;
};

const char *kRegex = "[a-c]{2,5}-[0-9]{1,3}";
const char *kSchema =
    R"({"type":"object","properties":{"n":{"type":"integer","minimum":-5,"maximum":500},"tag":{"enum":["x","yy"]},)"
    R"("ok":{"type":"boolean"},"list":{"type":"array","items":{"type":"integer"},"maxItems":3}},)"
    R"("required":["n","tag","ok"],"additionalProperties":false})";

std::vector<Case> workload(bool constrained) {
  std::vector<Case> cases;
  for (int i = 0; i < 4; ++i) {  // unconstrained, seeded: their tokens must not depend on the neighbours
    SamplingParams p;
    p.temperature = 1.0;
    p.seed = 100 + i;
    p.max_tokens = 24;
    p.ignore_eos = true;
    cases.push_back({"free" + std::to_string(i), p});
  }
  if (!constrained) return cases;
  auto make = [&](const std::string &id, StructuredOutputsParams so, int n) {
    SamplingParams p;
    p.temperature = 1.0;
    p.seed = static_cast<int64_t>(cases.size());
    p.max_tokens = 60;
    p.n = n;
    p.structured_outputs = std::move(so);
    cases.push_back({id, p});
  };
  StructuredOutputsParams re, choice, schema, object;
  re.regex = kRegex;
  choice.choice = std::vector<std::string>{"yes", "no", "maybe so"};
  schema.json = kSchema;
  object.json_object = true;
  make("regex", re, 3);
  make("choice", choice, 4);
  make("schema", schema, 3);
  make("object", object, 2);
  return cases;
}

std::map<std::string, RequestOutput> run(LLMEngine &engine, const std::vector<Case> &cases) {
  const auto prompts = testing::random_prompts(static_cast<int>(cases.size()), 9, 30, 256, 11);
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<int32_t> ids = prompts[i];
    for (int32_t &id : ids) id = id < 3 ? id + 3 : id;  // no BOS / EOS inside prompts
    Status s = engine.add_request(cases[i].id, PromptInput{"", ids}, cases[i].params);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  std::map<std::string, RequestOutput> done;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard) {
    StatusOr<std::vector<RequestOutput>> outs = engine.step();
    EXPECT_TRUE(outs.ok()) << outs.status().to_string();
    if (!outs.ok()) break;
    for (RequestOutput &o : *outs) {
      if (o.finished) done[o.request_id] = std::move(o);
    }
  }
  EXPECT_EQ(engine.core().scheduler().kv_cache_manager().usage(), 0.0);
  EXPECT_EQ(engine.core().scheduler().num_structured_requests(), 0);
  return done;
}

// Every finished constrained output matches its constraint; returns how many finished.
int check_constrained(const std::map<std::string, RequestOutput> &done) {
  int finished = 0;
  for (const auto &[id, r] : done) {
    for (const CompletionOutput &o : r.outputs) {
      if (id.rfind("free", 0) == 0 || o.finish_reason != FinishReason::kStop) continue;
      ++finished;
      if (id == "regex") {
        EXPECT_TRUE(std::regex_match(o.text, std::regex(kRegex))) << o.text;
      } else if (id == "choice") {
        EXPECT_TRUE(o.text == "yes" || o.text == "no" || o.text == "maybe so") << o.text;
      } else {
        nlohmann::json v = nlohmann::json::parse(o.text, nullptr, false);
        EXPECT_TRUE(v.is_object()) << id << ": " << o.text;
        if (!v.is_object()) continue;
        if (id == "schema") {
          EXPECT_TRUE(v.contains("n") && v["n"].is_number_integer()) << o.text;
          if (!v.contains("n") || !v["n"].is_number_integer()) continue;
          EXPECT_GE(v["n"].get<int64_t>(), -5);
          EXPECT_LE(v["n"].get<int64_t>(), 500);
          EXPECT_TRUE(v["tag"] == "x" || v["tag"] == "yy") << o.text;
          EXPECT_TRUE(v["ok"].is_boolean()) << o.text;
          if (v.contains("list")) {
            EXPECT_LE(v["list"].size(), 3u) << o.text;
          }
          for (auto it = v.begin(); it != v.end(); ++it) {
            EXPECT_TRUE(it.key() == "n" || it.key() == "tag" || it.key() == "ok" || it.key() == "list") << o.text;
          }
        }
      }
    }
  }
  return finished;
}

void expect_free_outputs_equal(const std::map<std::string, RequestOutput> &a,
                               const std::map<std::string, RequestOutput> &b) {
  for (int i = 0; i < 4; ++i) {
    const std::string id = "free" + std::to_string(i);
    ASSERT_TRUE(a.count(id) && b.count(id)) << id;
    EXPECT_EQ(a.at(id).outputs[0].token_ids, b.at(id).outputs[0].token_ids) << id;
  }
}

TEST(StructuredOutput, MixedBatchMatchesConstraintsAndLeavesOthersAlone) {
  EngineArgs args;
  args.max_num_batched_tokens = 32;  // chunked prefill: the mask applies on sampling steps only
  auto alone = make_engine(false, args);
  const auto free_only = run(*alone, workload(false));
  auto mixed = make_engine(false, args);
  const auto all = run(*mixed, workload(true));
  EXPECT_GE(check_constrained(all), 9);
  expect_free_outputs_equal(free_only, all);
  EXPECT_EQ(all.at("choice").outputs.size(), 4u);  // n > 1: one matcher per sequence
}

TEST(StructuredOutput, PreemptionAsyncAndPrefixCachingKeepTheConstraints) {
  EngineArgs args;
  args.block_size = 4;
  args.max_model_len = 96;
  args.num_kv_cache_tokens = 120;  // far too few blocks for everyone: preemption storms
  for (bool caching : {false, true}) {
    args.enable_prefix_caching = caching;
    auto sync = make_engine(false, args);
    const auto s = run(*sync, workload(true));
    EXPECT_GT(sync->totals().num_preemptions, 0) << "the pool was meant to be too small";
    EXPECT_GE(check_constrained(s), 9);
    auto async = make_engine(true, args);
    const auto a = run(*async, workload(true));
    EXPECT_GE(check_constrained(a), 9);
    // The constrained steps overlapped: their forward ran before the previous step was applied, their sampling
    // waited for the bitmask.
    EXPECT_GT(async->core().num_deferred_samples(), 0);
    EXPECT_EQ(sync->core().num_deferred_samples(), 0);
    // Seeded sampling: the sampled ids do not depend on when the bitmask arrived, so every output is the same.
    for (const auto &[id, r] : s) {
      ASSERT_EQ(r.outputs.size(), a.at(id).outputs.size()) << id;
      for (size_t k = 0; k < r.outputs.size(); ++k) EXPECT_EQ(r.outputs[k].text, a.at(id).outputs[k].text) << id;
    }
  }
}

TEST(StructuredOutput, BadConstraintIsRefusedBeforeScheduling) {
  auto engine = make_engine(false);
  SamplingParams p;
  p.structured_outputs = StructuredOutputsParams{};
  p.structured_outputs->regex = "(unclosed";
  Status s = engine->add_request("bad", PromptInput{"", {5, 6, 7}}, p);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("structured_outputs:", 0), 0u) << s.message();
  EXPECT_EQ(engine->core().scheduler().num_unfinished(), 0);
}

}  // namespace
}  // namespace llmserve
