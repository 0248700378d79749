// cudamagic: <stddef.h> for NVRTC device code, which has no C++ standard library.
// Size_t, ptrdiff_t, nullptr_t, byte from libcu++ (<cuda/std/cstddef>), declared in std:: name by name (NVRTC itself
// declares std::move, std::forward, std::tuple_size and std::tuple_element).
// A project's own <stddef.h> (in an -I folder) is found before this one.
#pragma once
#include <cuda/std/cstddef>
namespace std { using ::cuda::std::size_t; using ::cuda::std::ptrdiff_t;
  using ::cuda::std::nullptr_t; using ::cuda::std::max_align_t; using ::cuda::std::byte;
  using ::cuda::std::to_integer; }
