// cudamagic: <math.h> for NVRTC device code, which has no C++ standard library.
// The math functions are NVRTC's own device functions, in the global namespace as C has them,
// with their float and double overloads; std:: declares those same functions (not libcu++'s
// copies, so that `using namespace std;` and sqrt(x) is never ambiguous), and libcu++'s for
// the classification functions NVRTC lacks. The macros C's <math.h> has: HUGE_VAL, INFINITY,
// NAN, FP_*, and glibc's M_PI and the other M_ constants.
// A project's own <math.h> (in an -I folder) is found before this one.
#pragma once
#include <cuda/std/cmath>
#include <cuda/std/limits>
#include "cudamagic_math_macros.h"
#include "cudamagic_min_max.h"
namespace std { using ::abs; using ::fabs; using ::fmod; using ::remainder; using ::remquo;
  using ::fma; using ::fmax; using ::fmin; using ::fdim; using ::exp; using ::exp2;
  using ::expm1; using ::log; using ::log10; using ::log2; using ::log1p; using ::pow;
  using ::sqrt; using ::cbrt; using ::hypot; using ::sin; using ::cos; using ::tan;
  using ::asin; using ::acos; using ::atan; using ::atan2; using ::sinh; using ::cosh;
  using ::tanh; using ::asinh; using ::acosh; using ::atanh; using ::erf; using ::erfc;
  using ::tgamma; using ::lgamma; using ::ceil; using ::floor; using ::trunc; using ::round;
  using ::lround; using ::llround; using ::nearbyint; using ::rint; using ::lrint;
  using ::llrint; using ::frexp; using ::ldexp; using ::modf; using ::scalbn; using ::scalbln;
  using ::ilogb; using ::logb; using ::nextafter; using ::copysign; using ::isfinite;
  using ::isinf; using ::isnan; using ::signbit; using ::nan; }
namespace std { using ::cuda::std::fpclassify; using ::cuda::std::isnormal;
  using ::cuda::std::isgreater; using ::cuda::std::isgreaterequal; using ::cuda::std::isless;
  using ::cuda::std::islessequal; using ::cuda::std::islessgreater;
  using ::cuda::std::isunordered; }
