// Serving-benchmark maths against independent oracles: percentiles against values numpy 1.x/2.x printed for the
// same data (np.percentile, default linear method), TPOT / ITL / throughput against hand-made request records,
// and the SSE payload handling that produces those records.
#include "cli/bench_serve_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cli/bench_serve_client.h"
#include "cli/bench_serve_report.h"

namespace llmserve::cli {
namespace {

// numpy: rng = np.random.default_rng(7); a = np.round(rng.random(13) * 100, 6)
const std::vector<double> kData = {62.509547, 89.72138,  77.568569, 22.520719, 30.016628, 87.355345, 0.52653,
                                   82.122842, 79.706943, 46.793495, 30.303243, 27.842561, 25.486959};

TEST(Percentile, MatchesNumpy) {
  const std::vector<std::pair<double, double>> expected = {{0, 0.52653},        {1, 3.16583268},  {37.5, 30.1599355},
                                                           {50, 46.793495},     {90, 86.3088444}, {99, 89.4374558},
                                                           {99.9, 89.69298758}, {100, 89.72138}};
  for (const auto& [p, v] : expected) EXPECT_NEAR(percentile(kData, p), v, 1e-7) << "p" << p;
}

TEST(Percentile, EdgeCases) {
  EXPECT_EQ(percentile({}, 99), 0.0);  // vLLM: np.percentile(values or 0, p)
  EXPECT_EQ(percentile({4.5}, 0), 4.5);
  EXPECT_EQ(percentile({4.5}, 99), 4.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({4, 3, 2, 1}, 99), 3.97);  // unsorted input: rank 2.97 between 3 and 4
}

TEST(LatencyStats, MeanMedianStdInMilliseconds) {
  std::vector<double> seconds;
  for (double v : kData) seconds.push_back(v / 1000.0);
  LatencyStats s = latency_stats(seconds, {99});
  EXPECT_NEAR(s.mean_ms, 50.959597, 1e-9);
  EXPECT_NEAR(s.std_ms, 28.935324108862574, 1e-9);  // np.std: population (ddof = 0)
  EXPECT_NEAR(s.median_ms, 46.793495, 1e-9);
  ASSERT_EQ(s.percentiles_ms.size(), 1u);
  EXPECT_NEAR(s.percentiles_ms[0].second, 89.4374558, 1e-7);
  LatencyStats empty = latency_stats({}, {50, 99});
  EXPECT_EQ(empty.mean_ms, 0);
  EXPECT_EQ(empty.percentiles_ms.size(), 2u);
}

RequestOutput ok_request(double start, double ttft, std::vector<double> itl, int64_t prompt, int64_t usage_tokens) {
  RequestOutput o;
  o.success = true;
  o.start_time = start;
  o.ttft = ttft;
  o.itl = std::move(itl);
  o.latency = ttft;
  for (double v : o.itl) o.latency += v;
  o.prompt_len = prompt;
  o.output_tokens = usage_tokens;
  o.num_chunks = 1 + static_cast<int64_t>(o.itl.size());
  return o;
}

TEST(CalculateMetrics, TpotItlAndTotals) {
  std::vector<RequestOutput> outs;
  outs.push_back(ok_request(0.0, 0.050, {0.010, 0.010, 0.010}, 16, 4));  // tpot = 0.030 / 3 = 0.010
  outs.push_back(ok_request(0.5, 0.100, {0.020, 0.040}, 8, 5));          // usage says 5 tokens over 3 chunks
  outs.push_back(ok_request(1.0, 0.070, {}, 4, 1));                      // one token: no TPOT entry
  RequestOutput failed;
  failed.error = "HTTP 500 Internal Server Error";
  failed.prompt_len = 99;
  outs.push_back(failed);
  BenchmarkMetrics m = calculate_metrics(outs, 2.0, {50, 99}, nullptr);
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 16 + 8 + 4);  // the failed request's prompt does not count
  EXPECT_EQ(m.total_output, 4 + 5 + 1);
  EXPECT_EQ(m.output_lens, (std::vector<int64_t>{4, 5, 1, 0}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 5.0);
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 19.0);
  // TPOT = (latency - ttft) / (output_len - 1): 0.030 / 3 and 0.060 / 4.
  EXPECT_NEAR(m.tpot.mean_ms, (10.0 + 15.0) / 2, 1e-9);
  EXPECT_NEAR(m.tpot.median_ms, 12.5, 1e-9);
  // ITL: every gap of every request in one list: 10, 10, 10, 20, 40.
  EXPECT_NEAR(m.itl.mean_ms, 18.0, 1e-9);
  EXPECT_NEAR(m.itl.median_ms, 10.0, 1e-9);
  EXPECT_NEAR(m.itl.percentiles_ms[1].second, percentile({10, 10, 10, 20, 40}, 99), 1e-9);
  EXPECT_NEAR(m.ttft.mean_ms, (50.0 + 100.0 + 70.0) / 3, 1e-9);
  EXPECT_NEAR(m.e2el.mean_ms, (80.0 + 160.0 + 70.0) / 3, 1e-9);
  EXPECT_EQ(m.max_concurrent_requests, 1);  // [0, .08), [.5, .66), [1, 1.07) never overlap
  EXPECT_EQ(m.max_output_tokens_per_s, 7);  // second 0: 4 + 3 chunks; second 1: 1
}

TEST(CalculateMetrics, OutputLengthFallbacks) {
  RequestOutput o = ok_request(0, 0.01, {0.01, 0.01}, 3, 0);  // no usage: 3 chunks
  o.generated_text = "a b c d e";
  EXPECT_EQ(output_len_of(o, nullptr), 3);
  auto words = [](const std::string& t) { return static_cast<int64_t>(std::count(t.begin(), t.end(), ' ') + 1); };
  EXPECT_EQ(output_len_of(o, words), 5);
  o.output_tokens = 7;
  EXPECT_EQ(output_len_of(o, words), 7);  // usage wins
  BenchmarkMetrics m = calculate_metrics({ok_request(0, 0.01, {0.01, 0.01}, 3, 0)}, 1.0, {99}, nullptr);
  EXPECT_NEAR(m.tpot.mean_ms, 10.0, 1e-9);
}

TEST(CalculateMetrics, PeakConcurrencyUsesHalfOpenIntervals) {
  std::vector<RequestOutput> outs = {ok_request(0.0, 0.5, {0.5}, 1, 2), ok_request(1.0, 0.5, {0.5}, 1, 2),
                                     ok_request(0.2, 0.1, {0.1}, 1, 2), ok_request(0.25, 0.1, {0.1}, 1, 2)};
  BenchmarkMetrics m = calculate_metrics(outs, 2.0, {99}, nullptr);
  EXPECT_EQ(m.max_concurrent_requests, 3);  // 0.25..0.3: requests 0, 2 and 3; request 1 starts as 0 ends
}

TEST(CalculateMetrics, AllFailed) {
  RequestOutput f;
  f.error = "refused";
  BenchmarkMetrics m = calculate_metrics({f, f}, 1.0, {99}, nullptr);
  EXPECT_EQ(m.completed, 0);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.ttft.mean_ms, 0);
  EXPECT_EQ(m.max_concurrent_requests, 0);
}

TEST(StreamPayload, TimestampsUsageAndText) {
  RequestOutput o;
  o.start_time = 1.0;
  double last = o.start_time;
  EXPECT_TRUE(apply_stream_payload(R"({"choices":[{"index":0,"text":"Hel"}]})", false, 1.25, &last, &o));
  EXPECT_TRUE(apply_stream_payload(R"({"choices":[{"index":0,"text":"lo"}],"usage":null})", false, 1.30, &last, &o));
  EXPECT_TRUE(apply_stream_payload(R"({"choices":[{"index":0,"text":""}]})", false, 1.32, &last, &o));  // empty text
  EXPECT_TRUE(apply_stream_payload(R"({"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3}})", false, 1.5,
                                   &last, &o));
  EXPECT_TRUE(apply_stream_payload("[DONE]", false, 1.6, &last, &o));
  EXPECT_DOUBLE_EQ(o.ttft, 0.25);
  ASSERT_EQ(o.itl.size(), 2u);
  EXPECT_NEAR(o.itl[0], 0.05, 1e-12);
  EXPECT_NEAR(o.itl[1], 0.02, 1e-12);
  EXPECT_DOUBLE_EQ(last, 1.32);  // the usage chunk carries no token and does not move the end
  EXPECT_EQ(o.generated_text, "Hello");
  EXPECT_EQ(o.output_tokens, 3);
  EXPECT_EQ(o.prompt_len, 12);
  EXPECT_EQ(o.num_chunks, 3);
}

TEST(StreamPayload, ChatDeltasAndErrors) {
  RequestOutput o;
  double last = 0;
  EXPECT_TRUE(
      apply_stream_payload(R"({"choices":[{"delta":{"role":"assistant","content":"Hi"}}]})", true, 0.1, &last, &o));
  EXPECT_TRUE(apply_stream_payload(R"({"choices":[{"delta":{"content":" there"}}]})", true, 0.2, &last, &o));
  EXPECT_EQ(o.generated_text, "Hi there");
  RequestOutput e;
  EXPECT_FALSE(apply_stream_payload(R"({"error":{"message":"boom","type":"x"}})", false, 0.1, &last, &e));
  EXPECT_NE(e.error.find("boom"), std::string::npos);
  RequestOutput bad;
  EXPECT_FALSE(apply_stream_payload("{not json", false, 0.1, &last, &bad));
  EXPECT_NE(bad.error.find("invalid JSON"), std::string::npos);
  RequestOutput arr;
  EXPECT_FALSE(apply_stream_payload("[1, 2]", false, 0.1, &last, &arr));
}

TEST(BaseUrl, ParsesAndRejects) {
  StatusOr<BaseUrl> u = parse_base_url("http://127.0.0.1:8000");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "127.0.0.1");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->path_prefix, "");
  u = parse_base_url("http://example.org/prefix/");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->path_prefix, "/prefix");
  for (const char* bad :
       {"https://x:1", "127.0.0.1:8000", "http://:80", "http://x:0", "http://x:99999", "http://x:8a"}) {
    StatusOr<BaseUrl> r = parse_base_url(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--base-url"), std::string::npos);
  }
}

TEST(Report, SummaryAndJsonCarryTheSameFigures) {
  BenchRun run;
  run.model = "m";
  run.duration_s = 2.0;
  run.outputs = {ok_request(0.0, 0.050, {0.010, 0.010, 0.010}, 16, 4)};
  RequestOutput failed;
  failed.error = "HTTP 500 Internal Server Error";
  run.outputs.push_back(failed);
  ReportInfo info;
  info.backend = "openai";
  info.num_prompts = 2;
  info.request_rate = INFINITY;
  info.percentile_metrics = {"ttft", "tpot", "itl", "e2el"};
  info.percentiles = {99, 99.9};
  BenchmarkMetrics m = calculate_metrics(run.outputs, run.duration_s, info.percentiles, nullptr);
  const std::string s = format_summary(m, run, info);
  EXPECT_NE(s.find("============ Serving Benchmark Result ============"), std::string::npos);
  EXPECT_NE(s.find("Successful requests:                     1"), std::string::npos);
  EXPECT_NE(s.find("Failed requests:                         1"), std::string::npos);
  EXPECT_NE(s.find("Error 0 (request 1): HTTP 500"), std::string::npos);
  EXPECT_NE(s.find("Mean TPOT (ms):                          10.00"), std::string::npos);
  EXPECT_NE(s.find("P99.9 ITL (ms):"), std::string::npos);
  EXPECT_NE(s.find("-----Time per Output Token (excl. 1st token)------"), std::string::npos);
  nlohmann::ordered_json j = result_json(m, run, info);
  EXPECT_EQ(j["completed"], 1);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_EQ(j["request_rate"], "inf");
  EXPECT_EQ(j["total_output_tokens"], 4);
  EXPECT_DOUBLE_EQ(j["mean_tpot_ms"].get<double>(), m.tpot.mean_ms);
  EXPECT_TRUE(j.contains("p99_ttft_ms") && j.contains("p99.9_e2el_ms") && j.contains("std_itl_ms"));
  EXPECT_EQ(j["errors"][1], "HTTP 500 Internal Server Error");
  EXPECT_EQ(j["itls"][0].size(), 3u);
  EXPECT_EQ(j["output_lens"], (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(percentile_word(99.0), "99");
  EXPECT_EQ(percentile_word(99.9), "99.9");
}

}  // namespace
}  // namespace llmserve::cli
