// cudamagic: <stdint.h> for NVRTC device code, which has no C++ standard library.
// The fixed-width integer types (global too, as c has them) from libcu++ (<cuda/std/cstdint>), declared in std:: name by name (NVRTC itself
// declares std::move, std::forward, std::tuple_size and std::tuple_element).
// A project's own <stdint.h> (in an -I folder) is found before this one.
#pragma once
#include <cuda/std/cstdint>
namespace std { using ::cuda::std::int8_t; using ::cuda::std::uint8_t;
  using ::cuda::std::int_fast8_t; using ::cuda::std::uint_fast8_t;
  using ::cuda::std::int_least8_t; using ::cuda::std::uint_least8_t; using ::cuda::std::int16_t;
  using ::cuda::std::uint16_t; using ::cuda::std::int_fast16_t;
  using ::cuda::std::uint_fast16_t; using ::cuda::std::int_least16_t;
  using ::cuda::std::uint_least16_t; using ::cuda::std::int32_t; using ::cuda::std::uint32_t;
  using ::cuda::std::int_fast32_t; using ::cuda::std::uint_fast32_t;
  using ::cuda::std::int_least32_t; using ::cuda::std::uint_least32_t;
  using ::cuda::std::int64_t; using ::cuda::std::uint64_t; using ::cuda::std::int_fast64_t;
  using ::cuda::std::uint_fast64_t; using ::cuda::std::int_least64_t;
  using ::cuda::std::uint_least64_t; using ::cuda::std::intptr_t; using ::cuda::std::uintptr_t;
  using ::cuda::std::intmax_t; using ::cuda::std::uintmax_t; }
