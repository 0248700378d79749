// cudamagic: <float.h> for NVRTC device code, which has no C++ standard library.
// The names come from libcu++ (cuda/std/cfloat) (macros only).
// A project's own <float.h> (in an -I folder) is found before this one.
#pragma once
#include <cuda/std/cfloat>
