// The msgpack wire format between the frontend and the engine-core process. Every message is the msgpack array
// [kCodecVersion, type, body]; a struct is a map {field name: value} listed once per struct in codec.cc (an
// optional is nil when empty, an enum its integer, a pair a 2-array). Decoding rejects another version, a missing
// or ill-typed field, a bad enum value; it ignores fields it does not know (a newer peer's additions). Invariant:
// decode(encode(m)) == m for every message, and decoding any byte string either yields a well-formed message or
// an error naming what was wrong — never a crash or an unbounded allocation.
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
#include "executor/engine_core_builder.h"
#include "ipc/engine_core_loop.h"

namespace llmserve {

// Core -> frontend, first message: the core is built. Carries what the frontend validates against (vocabulary,
// max_model_len, scheduling policy) and the model config's EOS ids, so the frontend never re-derives them from
// the model (the core is the one source); the frontend adds its tokenizer's EOS ids.
using EngineCoreReady = EngineCoreInfo;
// Core -> frontend: building failed (first message instead of Ready), or a step failed (the core is dead).
struct EngineCoreFailure {
  StatusCode code = StatusCode::kInternal;
  std::string message;
};
// Frontend -> core: stop the loop and exit.
struct ShutdownCore {};

// The wire format's version, the first element of every message. Bump it when a field is removed, renamed or
// changes meaning or type. An added field needs no bump: older readers ignore it, and a reader that lists it
// refuses a message without it (a clear "missing" error, never a default).
inline constexpr int32_t kCodecVersion = 1;

using ToCoreMessage = std::variant<EngineCoreRequest, AbortRequests, FinishRequestsStopped, ShutdownCore>;
using FromCoreMessage = std::variant<EngineCoreReady, EngineCoreFailure, EngineCoreOutputs>;

std::string encode_message(const ToCoreMessage &message);
std::string encode_message(const FromCoreMessage &message);
// DataLoss naming the field for malformed bytes (bad msgpack, another version, a missing or ill-typed field,
// values out of range, trailing bytes).
StatusOr<ToCoreMessage> decode_to_core(std::string_view bytes);
StatusOr<FromCoreMessage> decode_from_core(std::string_view bytes);

}  // namespace llmserve
