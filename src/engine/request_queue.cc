// RequestQueue implementations: a deque for FCFS, an ordered set for priority (O(log n) add / pop / remove).
// Both only hold pointers; the Scheduler owns the Requests.
#include "engine/request_queue.h"

#include <algorithm>

#include "core/logging.h"

namespace llmserve {

std::unique_ptr<RequestQueue> make_request_queue(SchedulingPolicy policy) {
  if (policy == SchedulingPolicy::kPriority) return std::make_unique<PriorityRequestQueue>();
  return std::make_unique<FcfsRequestQueue>();
}

Request* FcfsRequestQueue::peek() const {
  CHECK(!q_.empty());
  return q_.front();
}

void FcfsRequestQueue::pop() {
  CHECK(!q_.empty());
  q_.pop_front();
}

bool FcfsRequestQueue::remove(const Request* req) {
  auto it = std::find(q_.begin(), q_.end(), req);
  if (it == q_.end()) return false;
  q_.erase(it);
  return true;
}

bool PriorityRequestQueue::Before::operator()(const Request* a, const Request* b) const {
  if (a->priority() != b->priority()) return a->priority() < b->priority();
  if (a->arrival_time() != b->arrival_time()) return a->arrival_time() < b->arrival_time();
  return a->request_id() < b->request_id();
}

Request* PriorityRequestQueue::peek() const {
  CHECK(!q_.empty());
  return *q_.begin();
}

void PriorityRequestQueue::pop() {
  CHECK(!q_.empty());
  q_.erase(q_.begin());
}

bool PriorityRequestQueue::remove(const Request* req) { return q_.erase(const_cast<Request*>(req)) > 0; }

}  // namespace llmserve
