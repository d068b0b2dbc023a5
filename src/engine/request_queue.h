// RequestQueue: the waiting queue as a strategy object, one per scheduling policy.
// FCFS serves by arrival (preempted requests go back to the front); priority serves by (priority, arrival
// time, request id), smallest first, wherever a request came from.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <set>
#include <vector>

#include "engine/request.h"

namespace llmserve {

enum class SchedulingPolicy { kFcfs, kPriority };

class RequestQueue {
 public:
  virtual ~RequestQueue() = default;
  // A newly arrived request.
  virtual void add(Request* req) = 0;
  // A preempted request, to be resumed before newer arrivals of the same rank.
  virtual void add_preempted(Request* req) = 0;
  // The next request to admit; CHECKs non-empty.
  virtual Request* peek() const = 0;
  virtual void pop() = 0;
  // Removes the request if present; returns whether it was.
  virtual bool remove(const Request* req) = 0;
  virtual size_t size() const = 0;
  bool empty() const { return size() == 0; }
  // Requests in service order (tests, debugging).
  virtual std::vector<Request*> ordered() const = 0;
};

std::unique_ptr<RequestQueue> make_request_queue(SchedulingPolicy policy);

class FcfsRequestQueue final : public RequestQueue {
 public:
  void add(Request* req) override { q_.push_back(req); }
  void add_preempted(Request* req) override { q_.push_front(req); }
  Request* peek() const override;
  void pop() override;
  bool remove(const Request* req) override;
  size_t size() const override { return q_.size(); }
  std::vector<Request*> ordered() const override { return {q_.begin(), q_.end()}; }

 private:
  std::deque<Request*> q_;
};

class PriorityRequestQueue final : public RequestQueue {
 public:
  void add(Request* req) override { q_.insert(req); }
  void add_preempted(Request* req) override { q_.insert(req); }
  Request* peek() const override;
  void pop() override;
  bool remove(const Request* req) override;
  size_t size() const override { return q_.size(); }
  std::vector<Request*> ordered() const override { return {q_.begin(), q_.end()}; }

  // Strict weak order: lower priority value first, then earlier arrival, then request id.
  struct Before {
    bool operator()(const Request* a, const Request* b) const;
  };

 private:
  std::set<Request*, Before> q_;
};

}  // namespace llmserve
