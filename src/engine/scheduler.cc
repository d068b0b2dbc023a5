// Scheduler: one schedule() = running pass (with preemption) + waiting pass (admission), then the output is
// built and num_computed_tokens advanced as if the step had run, which is what lets async scheduling plan
// step N+1 before step N returns. update_from_output() then only appends tokens and applies stop rules.
#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/logging.h"
#include "engine/structured_output.h"

namespace llmserve {

Status SchedulerConfig::validate(const KVCacheConfig& cache) const {
  if (max_num_batched_tokens < 1) return invalid_argument("max_num_batched_tokens must be at least 1");
  if (max_num_seqs < 1) return invalid_argument("max_num_seqs must be at least 1");
  if (max_model_len < 1) return invalid_argument("max_model_len must be at least 1");
  if (!enable_chunked_prefill && max_num_batched_tokens < max_model_len) {
    // Without chunking a prompt must fit one step, or it would wait forever.
    return invalid_argument("max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
                            ") must be at least max_model_len (" + std::to_string(max_model_len) +
                            ") when chunked prefill is disabled");
  }
  if (cache.block_size < 1) return invalid_argument("block_size must be at least 1");
  if (cache.num_blocks < 1) return invalid_argument("num_blocks must be at least 1");
  const int64_t capacity = static_cast<int64_t>(cache.num_blocks) * cache.block_size;
  if (max_model_len > capacity) {
    return invalid_argument("max_model_len (" + std::to_string(max_model_len) +
                            ") is larger than the KV cache can hold (" + std::to_string(cache.num_blocks) +
                            " blocks of " + std::to_string(cache.block_size) + " tokens = " + std::to_string(capacity) +
                            " tokens)");
  }
  return ok_status();
}

// What one schedule() call has decided so far.
struct Scheduler::StepState {
  enum class Kind { kRunning, kNew, kResumed };
  struct Entry {
    Request* req;
    int64_t num_tokens;
    Kind kind;
    KVCacheBlocks new_blocks;  // kRunning only: blocks added this step
  };
  int64_t token_budget = 0;
  std::vector<Entry> entries;
  std::vector<RequestId> preempted_req_ids;
};

Scheduler::Scheduler(SchedulerConfig config, KVCacheConfig cache_config)
    : config_(std::move(config)), kv_(cache_config), waiting_(make_request_queue(config_.policy)) {
  CHECK_OK(config_.validate(cache_config));
  running_.reserve(config_.max_num_seqs);
}

Scheduler::~Scheduler() = default;

double Scheduler::now() const {
  if (config_.clock) return config_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Scheduler::record_event(Request& req, EngineCoreEventType type) {
  if (config_.log_stats) pending_events_[req.request_id()].push_back({type, now()});
}

Status Scheduler::add_request(EngineCoreRequest in) {
  const int64_t prompt_len = static_cast<int64_t>(in.prompt_token_ids.size());
  const int64_t max_len = config_.max_model_len;
  if (prompt_len == 0) return invalid_argument("prompt: the prompt cannot be empty");
  if (prompt_len >= max_len) {
    return invalid_argument("prompt: the prompt (length " + std::to_string(prompt_len) +
                            ") is longer than the maximum model length of " + std::to_string(max_len) +
                            " (at least one token must be generated)");
  }
  const std::optional<int64_t> requested = in.sampling_params.max_tokens;
  if (requested && prompt_len + *requested > max_len) {
    return invalid_argument("max_tokens: this model's maximum context length is " + std::to_string(max_len) +
                            " tokens. However, you requested " + std::to_string(prompt_len + *requested) + " tokens (" +
                            std::to_string(prompt_len) + " in the prompt, " + std::to_string(*requested) +
                            " in the completion). Please reduce the length of the "
                            "prompt or completion.");
  }
  if (requested && *requested < 1) return invalid_argument("max_tokens must be at least 1");
  if (requests_.count(in.request_id)) {
    return {StatusCode::kAlreadyExists, "request id '" + in.request_id + "' is already in use"};
  }
  // Structured output: the grammar is compiled (or found in the compiler's cache) before anything is queued.
  std::unique_ptr<structured::GrammarMatcher> matcher;
  if (in.sampling_params.structured_outputs) {
    ASSIGN_OR_RETURN(matcher,
                     make_grammar_matcher(config_.grammar_compiler.get(), *in.sampling_params.structured_outputs));
  }
  auto req = std::make_unique<Request>(std::move(in));  // its RequestId is the one allocation every copy shares
  if (matcher) {
    req->grammar_matcher = std::move(matcher);
    ++num_structured_;
  }
  req->max_tokens_ = requested.value_or(max_len - prompt_len);
  req->token_ids_.reserve(static_cast<size_t>(prompt_len + req->max_tokens_));
  Request* raw = req.get();
  requests_.emplace(raw->request_id(), std::move(req));
  waiting_->add(raw);
  record_event(*raw, EngineCoreEventType::kQueued);
  return ok_status();
}

Request* Scheduler::preempt_one(StepState& st, size_t* victim_pos) {
  size_t victim_index = running_.size() - 1;  // FCFS: the latest arrival in the running list
  if (config_.policy == SchedulingPolicy::kPriority) {
    // The one served last under the priority order: highest priority value, then latest arrival.
    PriorityRequestQueue::Before before;
    for (size_t j = 0; j < running_.size(); ++j) {
      if (before(running_[victim_index], running_[j])) victim_index = j;
    }
  }
  Request* victim = running_[victim_index];
  *victim_pos = victim_index;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(victim_index));
  // Under priority the victim may already be scheduled this step: give its tokens back.
  for (auto it = st.entries.begin(); it != st.entries.end(); ++it) {
    if (it->req == victim) {
      st.token_budget += it->num_tokens;
      st.entries.erase(it);
      break;
    }
  }
  kv_.free(*victim);
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  victim->num_output_placeholders = 0;
  ++victim->num_preemptions;
  ++num_preemptions_;
  waiting_->add_preempted(victim);
  st.preempted_req_ids.push_back(victim->request_id());
  record_event(*victim, EngineCoreEventType::kPreempted);
  return victim;
}

void Scheduler::schedule_running(StepState& st) {
  size_t i = 0;
  while (i < running_.size() && st.token_budget > 0) {
    Request* req = running_[i];
    CHECK_LE(req->num_tokens(), config_.max_model_len) << req->request_id();
    const int64_t num_new_tokens =
        std::min(req->num_tokens() + req->num_output_placeholders - req->num_computed_tokens, st.token_budget);
    if (num_new_tokens <= 0 || placeholder_is_past_the_end(*req)) {
      ++i;
      continue;
    }
    std::optional<KVCacheBlocks> new_blocks;
    bool preempted_self = false;
    while (!(new_blocks = kv_.allocate_slots(*req, num_new_tokens))) {
      size_t victim_pos = 0;
      if (preempt_one(st, &victim_pos) == req) {
        preempted_self = true;
        break;
      }
      // A victim before position i (priority policy only) shifts this request left by one.
      if (victim_pos < i) --i;
    }
    if (preempted_self) break;
    st.entries.push_back({req, num_new_tokens, StepState::Kind::kRunning, std::move(*new_blocks)});
    st.token_budget -= num_new_tokens;
    ++i;
  }
}

void Scheduler::schedule_waiting(StepState& st) {
  while (!waiting_->empty() && st.token_budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Request* req = waiting_->peek();
    KVCacheBlocks computed;
    int64_t num_new_computed = 0;
    if (req->num_computed_tokens == 0) std::tie(computed, num_new_computed) = kv_.get_computed_blocks(*req);
    int64_t num_new_tokens = req->num_tokens() - req->num_computed_tokens - num_new_computed;
    CHECK_GT(num_new_tokens, 0) << req->request_id();
    if (!config_.enable_chunked_prefill && num_new_tokens > st.token_budget) break;
    num_new_tokens = std::min(num_new_tokens, st.token_budget);
    if (!kv_.allocate_slots(*req, num_new_tokens, &computed, num_new_computed)) break;
    waiting_->pop();
    const bool resumed = req->status == RequestStatus::kPreempted;
    req->status = RequestStatus::kRunning;
    req->num_computed_tokens += num_new_computed;
    if (req->num_cached_tokens < 0) req->num_cached_tokens = num_new_computed;
    running_.push_back(req);
    st.entries.push_back({req, num_new_tokens, resumed ? StepState::Kind::kResumed : StepState::Kind::kNew, {}});
    st.token_budget -= num_new_tokens;
    record_event(*req, EngineCoreEventType::kScheduled);
  }
}

bool Scheduler::placeholder_is_past_the_end(const Request& req) const {
  // Under async scheduling the token to compute may be a placeholder: once the tokens already owed reach
  // max_tokens or max_model_len, the request ends when they arrive, so computing another one would be wasted.
  const int64_t owed = req.num_output_placeholders;
  return owed > 0 &&
         (req.num_output_tokens() + owed >= req.max_tokens() || req.num_tokens() + owed >= config_.max_model_len);
}

SchedulerOutput Scheduler::schedule() {
  StepState st;
  st.token_budget = config_.max_num_batched_tokens;
  st.entries.reserve(running_.size() + 8);
  schedule_running(st);
  // vLLM's rule: a step that had to preempt admits nobody, or the victim could be re-admitted at once.
  if (st.preempted_req_ids.empty()) schedule_waiting(st);

  SchedulerOutput out;
  const int64_t step_id = num_scheduled_steps_++;
  std::vector<Request*>& in_flight = in_flight_.emplace_back();
  in_flight.reserve(st.entries.size());
  out.num_scheduled_tokens.reserve(st.entries.size());
  out.scheduled_cached_reqs.reserve(st.entries.size());
  std::vector<Request*> constrained_sampling;  // constrained requests that sample this step, in batch order
  for (auto& e : st.entries) {
    Request& req = *e.req;
    out.num_scheduled_tokens.push_back({req.request_id(), e.num_tokens});
    out.total_num_scheduled_tokens += e.num_tokens;
    in_flight.push_back(&req);
    if (e.kind == StepState::Kind::kNew) {
      out.scheduled_new_reqs.push_back(
          {req.request_id(), std::vector<int32_t>(req.token_ids().begin(), req.token_ids().end()),
           req.sampling_params(), kv_.get_block_ids(req), req.num_computed_tokens, req.all_stop_token_ids()});
    } else {
      CachedRequestData& c = out.scheduled_cached_reqs.emplace_back();
      c.req_id = req.request_id();
      c.resumed_from_preemption = e.kind == StepState::Kind::kResumed;
      c.new_block_ids = c.resumed_from_preemption ? kv_.get_block_ids(req) : e.new_blocks.take_block_ids();
      c.num_computed_tokens = req.num_computed_tokens;
    }
    req.num_computed_tokens += e.num_tokens;
    req.last_scheduled_step_ = step_id;
    // Every known and owed token computed: this step samples the next one, owed until its output is applied.
    if (req.num_computed_tokens == req.num_tokens() + req.num_output_placeholders) {
      ++req.num_output_placeholders;
      if (req.grammar_matcher) constrained_sampling.push_back(&req);
    }
  }
  // A constrained request whose previous token is still in flight (a second placeholder) cannot have its bitmask
  // yet: the step's sampling waits for it (fill_deferred_grammar_bitmask), its forward does not.
  const bool defer = std::any_of(constrained_sampling.begin(), constrained_sampling.end(),
                                 [](const Request* r) { return r->num_output_placeholders > 1; });
  CHECK(deferred_bitmask_reqs_.empty()) << "a step was scheduled before the previous one's bitmask was filled";
  if (defer) {
    out.grammar_bitmask_deferred = true;
    deferred_bitmask_reqs_ = std::move(constrained_sampling);
  } else if (!constrained_sampling.empty()) {
    fill_grammar_bitmask(constrained_sampling, out);
  }
  CHECK_LE(out.total_num_scheduled_tokens, config_.max_num_batched_tokens);
  out.finished_req_ids = std::move(finished_req_ids_);
  finished_req_ids_.clear();
  out.preempted_req_ids = std::move(st.preempted_req_ids);
  return out;
}

void Scheduler::fill_deferred_grammar_bitmask(SchedulerOutput& out) {
  CHECK(out.grammar_bitmask_deferred) << "the step's bitmask was not deferred";
  CHECK_EQ(num_applied_steps_ + 1, num_scheduled_steps_) << "a deferred bitmask needs every earlier step applied";
  std::vector<Request*> sampling = std::move(deferred_bitmask_reqs_);
  deferred_bitmask_reqs_.clear();
  out.grammar_bitmask_deferred = false;
  // Finished (retired: no matcher), aborted or preempted since: the token this step samples for it is dropped.
  std::erase_if(sampling, [](const Request* r) { return r->status != RequestStatus::kRunning || !r->grammar_matcher; });
  if (!sampling.empty()) fill_grammar_bitmask(sampling, out);
}

void Scheduler::fill_grammar_bitmask(const std::vector<Request*>& sampling, SchedulerOutput& out) {
  std::vector<structured::GrammarMatcher*> matchers;
  matchers.reserve(sampling.size());
  for (Request* req : sampling) {
    // The bitmask is for the token after every output: only this step's own token may be unapplied (a deferred
    // bitmask is filled once the previous step is), so this only checks the matcher's count.
    CHECK_EQ(req->num_output_placeholders, 1)
        << req->request_id() << ": constrained request planned ahead of its tokens";
    const std::span<const int32_t> outputs(req->output_token_ids(), static_cast<size_t>(req->num_output_tokens()));
    if (!sync_matcher(*req->grammar_matcher, outputs)) {
      LOG(ERROR) << req->request_id() << ": an output token is not allowed by the request's grammar";
    }
    out.structured_output_req_ids.push_back(req->request_id());
    matchers.push_back(req->grammar_matcher.get());
  }
  const int32_t words = matchers.front()->bitmask_words();
  out.grammar_bitmask_words = words;
  out.grammar_bitmask.resize(matchers.size() * static_cast<size_t>(words));
  fill_grammar_bitmasks(matchers, words, out.grammar_bitmask.data());
}

bool Scheduler::advance_grammar(Request& req) {
  structured::GrammarMatcher& m = *req.grammar_matcher;
  if (!m.accept_token(req.token_ids().back())) {
    // The sampler only draws allowed tokens, so this is an engine bug: end the request visibly rather than emit
    // text that breaks its constraint.
    LOG(ERROR) << req.request_id() << ": sampled token " << req.token_ids().back()
               << " is not allowed by the request's grammar; aborting it";
    req.status = RequestStatus::kFinishedAborted;
    return true;
  }
  // A complete grammar allows only EOS next: the request ends on that EOS as vLLM's does (one more step, so the
  // reply's last token stays text and EOS is the hidden stop token). Here only an EOS the stop check let through
  // (ignore_eos) ends it.
  const int32_t last = req.token_ids().back();
  const std::vector<int32_t>& stop_ids = req.all_stop_token_ids();
  const bool eos = (req.eos_token_id() && last == *req.eos_token_id()) ||
                   std::find(stop_ids.begin(), stop_ids.end(), last) != stop_ids.end();
  if (!m.is_terminated() || !eos) return false;
  req.status = RequestStatus::kFinishedStopped;
  req.stop_reason = std::monostate{};
  return true;
}

bool Scheduler::check_stop(Request& req) const {
  if (req.num_tokens() >= config_.max_model_len || req.num_output_tokens() >= req.max_tokens()) {
    req.status = RequestStatus::kFinishedLength;
    return true;
  }
  const SamplingParams& sp = req.sampling_params();
  if (req.num_output_tokens() < sp.min_tokens) return false;
  const int32_t last = req.token_ids().back();
  const std::vector<int32_t>& stop_ids = req.all_stop_token_ids();
  if (std::find(stop_ids.begin(), stop_ids.end(), last) == stop_ids.end()) return false;
  req.status = RequestStatus::kFinishedStopped;
  // EOS reports no stop_reason (vLLM); a stop token id, even one equal to EOS under ignore_eos, reports itself.
  const bool is_eos = !sp.ignore_eos && req.eos_token_id() && last == *req.eos_token_id();
  if (is_eos) {
    req.stop_reason = std::monostate{};
  } else {
    req.stop_reason = last;
  }
  return true;
}

EngineCoreOutputs Scheduler::update_from_output(const SchedulerOutput& scheduler_output,
                                                const ModelRunnerOutput& runner_output) {
  EngineCoreOutputs outs;
  outs.outputs = std::move(pending_outputs_);
  pending_outputs_.clear();
  outs.outputs.reserve(outs.outputs.size() + runner_output.req_ids.size());
  CHECK_EQ(runner_output.req_ids.size(), runner_output.sampled_token_ids.size());
  CHECK_EQ(runner_output.req_ids.size(), scheduler_output.num_scheduled_tokens.size());
  CHECK(!in_flight_.empty()) << "update_from_output without a scheduled step";
  const std::vector<Request*> in_flight = std::move(in_flight_.front());
  in_flight_.pop_front();
  ++num_applied_steps_;
  std::vector<RequestId> finished;
  for (size_t i = 0; i < runner_output.req_ids.size(); ++i) {
    const RequestId& id = runner_output.req_ids[i];
    Request* found = i < in_flight.size() ? in_flight[i] : nullptr;
    if (found == nullptr || !(found->request_id() == id)) {
      auto it = requests_.find(id.str());
      if (it == requests_.end()) continue;  // finished from outside while the step ran
      found = it->second.get();
    }
    Request& req = *found;
    // Finished (stopped one step late under async scheduling, aborted) or preempted since this step was
    // scheduled: its tokens are dropped. Also a new request reusing an aborted id.
    if (req.status != RequestStatus::kRunning) continue;
    const auto& sampled = runner_output.sampled_token_ids[i];
    const bool has_prompt_logprobs =
        i < runner_output.prompt_logprobs.size() && !runner_output.prompt_logprobs[i].empty();
    if (sampled.empty() && !has_prompt_logprobs) continue;
    CHECK(sampled.empty() || (req.num_output_placeholders >= 1 &&
                              req.num_computed_tokens == req.num_tokens() + req.num_output_placeholders - 1))
        << "runner sampled for " << id << " before its prompt was computed";
    EngineCoreOutput& o = outs.outputs.emplace_back();
    o.request_id = id;
    bool stopped = false;
    for (int32_t tok : sampled) {
      req.append_output_token(tok);
      --req.num_output_placeholders;
      o.new_token_ids.push_back(tok);
      if ((stopped = check_stop(req))) break;
      if (req.grammar_matcher && (stopped = advance_grammar(req))) break;
    }
    if (i < runner_output.logprobs.size() && !runner_output.logprobs[i].empty()) {
      const auto& lp = runner_output.logprobs[i];
      o.new_logprobs.assign(lp.begin(), lp.begin() + std::min(lp.size(), o.new_token_ids.size()));
    }
    if (has_prompt_logprobs) o.new_prompt_logprobs = runner_output.prompt_logprobs[i];
    o.num_cached_tokens = std::max<int64_t>(0, req.num_cached_tokens);
    if (stopped) {
      o.finish_reason = finish_reason_of(req.status);
      o.stop_reason = req.stop_reason;
      finished_req_ids_.push_back(id);
      finished.push_back(id);
    }
    if (config_.log_stats) {
      auto ev = pending_events_.find(id);
      if (ev != pending_events_.end()) {
        o.events = std::move(ev->second);
        pending_events_.erase(ev);
      }
    }
  }
  if (!finished.empty()) {
    std::erase_if(running_, [](const Request* r) { return is_finished(r->status); });
    for (const auto& id : finished) {
      auto it = requests_.find(id.str());
      std::unique_ptr<Request> req = std::move(it->second);
      requests_.erase(it);
      retire(std::move(req));
    }
  }
  release_drained();
  SchedulerStats& s = outs.scheduler_stats;
  s.num_running_reqs = num_running();
  s.num_waiting_reqs = num_waiting();
  s.kv_cache_usage = kv_.usage();
  const PrefixCacheStats pc = kv_.take_prefix_cache_stats();
  s.prefix_cache_requests = pc.requests;
  s.prefix_cache_queries = pc.queries;
  s.prefix_cache_hits = pc.hits;
  s.num_preemptions = num_preemptions_;
  num_preemptions_ = 0;
  if (config_.log_stats) outs.timestamp = now();
  return outs;
}

bool Scheduler::finish_request(const std::string& request_id, RequestStatus status, StopReason stop_reason) {
  CHECK(is_finished(status)) << request_status_name(status);
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return false;
  Request& req = *it->second;
  if (req.status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), &req));
  } else {
    CHECK(waiting_->remove(&req)) << request_id << " is neither running nor waiting";
  }
  req.status = status;
  req.stop_reason = std::move(stop_reason);
  EngineCoreOutput& o = pending_outputs_.emplace_back();
  o.request_id = req.request_id();
  o.finish_reason = finish_reason_of(status);
  o.stop_reason = req.stop_reason;
  o.num_cached_tokens = std::max<int64_t>(0, req.num_cached_tokens);
  auto ev = pending_events_.find(request_id);
  if (ev != pending_events_.end()) {
    o.events = std::move(ev->second);
    pending_events_.erase(ev);
  }
  finished_req_ids_.push_back(req.request_id());
  std::unique_ptr<Request> owned = std::move(it->second);
  requests_.erase(it);
  retire(std::move(owned));
  return true;
}

void Scheduler::retire(std::unique_ptr<Request> req) {
  if (req->grammar_matcher) {
    --num_structured_;
    req->grammar_matcher.reset();
  }
  // A step in flight may still write its K/V (and its in-flight entry points at it): keep both until it is applied.
  if (req->last_scheduled_step_ >= num_applied_steps_) {
    draining_.push_back(std::move(req));
  } else {
    kv_.free(*req);
  }
}

void Scheduler::release_drained() {
  std::erase_if(draining_, [this](const std::unique_ptr<Request>& req) {
    if (req->last_scheduled_step_ >= num_applied_steps_) return false;
    kv_.free(*req);
    return true;
  });
}

std::vector<const Request*> Scheduler::draining() const {
  std::vector<const Request*> out;
  for (const auto& r : draining_) out.push_back(r.get());
  return out;
}

const Request* Scheduler::get_request(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

int64_t SchedulerOutput::num_scheduled_tokens_of(const std::string& req_id) const {  // NOLINT
  for (const auto& s : num_scheduled_tokens) {
    if (s.req_id == req_id) return s.num_tokens;
  }
  return 0;
}

}  // namespace llmserve
