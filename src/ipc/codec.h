// The msgpack wire format between the frontend and the engine-core process: every message is one msgpack
// array [type, fields...] with the structs' fields in declaration order (optionals as nil). Invariant:
// decode(encode(m)) == m for every message, and decoding any byte string either yields a well-formed message
// or an error naming what was wrong — never a crash or an unbounded allocation.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"
#include "engine/request.h"
#include "engine/scheduler_output.h"
#include "ipc/engine_core_loop.h"

namespace llmserve {

// Core -> frontend, first message: the core is built. Carries what the frontend validates against, so the
// frontend never re-derives it from the model (the core is the one source).
struct EngineCoreReady {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  std::optional<int32_t> eos_token_id;
  std::vector<int32_t> extra_eos_ids;
};
// Core -> frontend: building failed (first message instead of Ready), or a step failed (the core is dead).
struct EngineCoreFailure {
  StatusCode code = StatusCode::kInternal;
  std::string message;
};
// Frontend -> core: stop the loop and exit.
struct ShutdownCore {};

using ToCoreMessage = std::variant<EngineCoreRequest, AbortRequests, FinishRequestsStopped, ShutdownCore>;
using FromCoreMessage = std::variant<EngineCoreReady, EngineCoreFailure, EngineCoreOutputs>;

std::string encode_message(const ToCoreMessage &message);
std::string encode_message(const FromCoreMessage &message);
// DataLoss naming the field for malformed bytes (bad msgpack, wrong types or sizes, values out of range,
// trailing bytes).
StatusOr<ToCoreMessage> decode_to_core(std::string_view bytes);
StatusOr<FromCoreMessage> decode_from_core(std::string_view bytes);

}  // namespace llmserve
