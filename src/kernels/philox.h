// Philox4x32-10 (Salmon et al., "Parallel Random Numbers: As Easy as 1, 2, 3", SC'11): a counter-based generator,
// a pure function of (counter, key), written from the paper so CPU and CUDA sampling draw identical numbers.
// Invariant: outputs match Random123's published known-answer vectors (tests/kernels/sampling_test.cc).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LLMSERVE_HOST_DEVICE __host__ __device__
#else
#define LLMSERVE_HOST_DEVICE
#endif

namespace llmserve::philox {

struct Block {
  uint32_t v[4];
};

// One Philox4x32-10 block: 10 rounds of the multiply-xor Feistel network, the key bumped by the Weyl constants
// between rounds.
LLMSERVE_HOST_DEVICE inline Block philox4x32_10(Block counter, uint32_t key0, uint32_t key1) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;  // round multipliers
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;  // key schedule (golden ratio, sqrt(3) - 1)
  uint32_t* c = counter.v;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kW0;
      key1 += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ key0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ key1;
    c[0] = n0;
    c[1] = static_cast<uint32_t>(p1);
    c[2] = n2;
    c[3] = static_cast<uint32_t>(p0);
  }
  return counter;
}

// The uniform double in [0, 1) (53 random bits) that sampling draws for one row: key = seed, counter =
// (offset, 0). A seeded request passes (its seed, its step index), so its draw depends on nothing else in the
// batch.
LLMSERVE_HOST_DEVICE inline double uniform(uint64_t seed, uint64_t offset) {
  const Block out = philox4x32_10(Block{{static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32), 0u, 0u}},
                                  static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint64_t bits = (static_cast<uint64_t>(out.v[0]) << 32 | out.v[1]) >> 11;
  return static_cast<double>(bits) * 0x1.0p-53;
}

// SplitMix64 finaliser: a bijective 64-bit mix, used to derive per-step keys from an engine seed.
LLMSERVE_HOST_DEVICE inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace llmserve::philox
