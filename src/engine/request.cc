// Request: names of statuses / finish reasons and construction from an EngineCoreRequest.
// The only place that maps RequestStatus onto the OpenAI finish_reason vocabulary.
#include "engine/request.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve {

const char* request_status_name(RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      return "WAITING";
    case RequestStatus::kRunning:
      return "RUNNING";
    case RequestStatus::kPreempted:
      return "PREEMPTED";
    case RequestStatus::kFinishedStopped:
      return "FINISHED_STOPPED";
    case RequestStatus::kFinishedLength:
      return "FINISHED_LENGTH";
    case RequestStatus::kFinishedAborted:
      return "FINISHED_ABORTED";
  }
  return "?";
}

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
  }
  return "?";
}

FinishReason finish_reason_of(RequestStatus status) {
  CHECK(is_finished(status)) << request_status_name(status);
  if (status == RequestStatus::kFinishedStopped) return FinishReason::kStop;
  if (status == RequestStatus::kFinishedLength) return FinishReason::kLength;
  return FinishReason::kAbort;
}

std::vector<EngineCoreRequest> fan_out_parallel_sampling(const EngineCoreRequest& parent) {
  const int32_t n = std::max<int32_t>(1, parent.sampling_params.n);
  std::vector<EngineCoreRequest> children(static_cast<size_t>(n), parent);
  for (int32_t i = 0; i < n; ++i) {
    EngineCoreRequest& c = children[static_cast<size_t>(i)];
    c.request_id = std::to_string(i) + "_" + parent.request_id;
    c.sampling_params.n = 1;
    if (parent.sampling_params.seed) c.sampling_params.seed = *parent.sampling_params.seed + i;
  }
  return children;
}

Request::Request(EngineCoreRequest req)
    : request_id_(std::move(req.request_id)),
      sampling_params_(std::move(req.sampling_params)),
      arrival_time_(req.arrival_time),
      priority_(req.priority),
      eos_token_id_(req.eos_token_id),
      all_stop_token_ids_(llmserve::all_stop_token_ids(sampling_params_, eos_token_id_)),
      cache_salt_(req.cache_salt),
      token_ids_(std::move(req.prompt_token_ids)),
      num_prompt_tokens_(static_cast<int64_t>(token_ids_.size())) {}

}  // namespace llmserve
