// cudamagic: <limits.h> for NVRTC device code, which has no C++ standard library.
// The names come from libcu++ (cuda/std/climits) (macros only).
// A project's own <limits.h> (in an -I folder) is found before this one.
#pragma once
#include <cuda/std/climits>
