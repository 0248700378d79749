// cudamagic: <math.h> for NVRTC device code, which has no C++ standard library: the functions
// with every overload the standard gives them, std:: and the global namespace alike, and the
// macros C's <math.h> has: HUGE_VAL, INFINITY, NAN, FP_*, and glibc's M_PI and the other M_
// constants (cudamagic_math.h says how).
// A project's own <math.h> (in an -I folder) is found before this one.
#pragma once
#include "cudamagic_math.h"
