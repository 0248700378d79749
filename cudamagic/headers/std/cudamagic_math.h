// cudamagic: what <cmath> and <math.h> declare for NVRTC device code, which has no C++ standard
// library. The math functions are NVRTC's own device functions, in the global namespace as C
// has them, with their float and double overloads; std:: declares those same functions (not
// libcu++'s copies, so that `using namespace std;` and sqrt(x) is never ambiguous), and
// libcu++'s for the classification functions NVRTC lacks and lerp.
//
// The overloads C++'s <cmath> adds to C's functions ([c.math.syn]: "sufficient
// additional overloads"), in the global namespace beside NVRTC's own float and double ones, as a
// host's <math.h> has them there. NVRTC has sqrt(float) and sqrt(double) only, so sqrt(n) of an
// int took either and was ambiguous; an argument list that is not all float or all double (an
// integer, float with double) is taken here as double, as the standard says. long double is
// left out: device code has none of its own. The float and double calls stay NVRTC's (a
// template loses to an exact match), CUDA's pow(float, int) too.
#pragma once
#include <cuda/std/cmath>
#include <cuda/std/limits>
#include <cuda/std/type_traits>
#include "cudamagic_math_macros.h"
#include "cudamagic_min_max.h"
namespace __cudamagic_math {
template <class T> constexpr bool takes = ::cuda::std::is_arithmetic<T>::value
    && !::cuda::std::is_same<T, long double>::value;
// arguments that NVRTC's float and double overloads both take inexactly
template <class... T> constexpr bool as_double = (takes<T> && ...)
    && !(::cuda::std::is_same<T, float>::value && ...)
    && !(::cuda::std::is_same<T, double>::value && ...);
template <class... T> using if_double = ::cuda::std::enable_if_t<as_double<T...>, int>;
}  // namespace __cudamagic_math

#define __CUDAMAGIC_MATH_1(f) \
  template <class A, __cudamagic_math::if_double<A> = 0> \
  __host__ __device__ inline auto f(A a) -> decltype(::f(0.0)) \
  { return ::f(static_cast<double>(a)); }
#define __CUDAMAGIC_MATH_2(f) \
  template <class A, class B, __cudamagic_math::if_double<A, B> = 0> \
  __host__ __device__ inline auto f(A a, B b) -> decltype(::f(0.0, 0.0)) \
  { return ::f(static_cast<double>(a), static_cast<double>(b)); }
#define __CUDAMAGIC_MATH_3(f) \
  template <class A, class B, class C, __cudamagic_math::if_double<A, B, C> = 0> \
  __host__ __device__ inline auto f(A a, B b, C c) -> decltype(::f(0.0, 0.0, 0.0)) \
  { return ::f(static_cast<double>(a), static_cast<double>(b), static_cast<double>(c)); }
// a double parameter first, then one that is not (frexp's int*, ldexp's int)
#define __CUDAMAGIC_MATH_1_AND(f, P) \
  template <class A, __cudamagic_math::if_double<A> = 0> \
  __host__ __device__ inline double f(A a, P p) { return ::f(static_cast<double>(a), p); }

__CUDAMAGIC_MATH_1(acos) __CUDAMAGIC_MATH_1(asin) __CUDAMAGIC_MATH_1(atan)
__CUDAMAGIC_MATH_1(cos) __CUDAMAGIC_MATH_1(sin) __CUDAMAGIC_MATH_1(tan)
__CUDAMAGIC_MATH_1(acosh) __CUDAMAGIC_MATH_1(asinh) __CUDAMAGIC_MATH_1(atanh)
__CUDAMAGIC_MATH_1(cosh) __CUDAMAGIC_MATH_1(sinh) __CUDAMAGIC_MATH_1(tanh)
__CUDAMAGIC_MATH_1(exp) __CUDAMAGIC_MATH_1(exp2) __CUDAMAGIC_MATH_1(expm1)
__CUDAMAGIC_MATH_1(log) __CUDAMAGIC_MATH_1(log10) __CUDAMAGIC_MATH_1(log1p)
__CUDAMAGIC_MATH_1(log2) __CUDAMAGIC_MATH_1(logb) __CUDAMAGIC_MATH_1(ilogb)
__CUDAMAGIC_MATH_1(cbrt) __CUDAMAGIC_MATH_1(fabs) __CUDAMAGIC_MATH_1(sqrt)
__CUDAMAGIC_MATH_1(erf) __CUDAMAGIC_MATH_1(erfc) __CUDAMAGIC_MATH_1(lgamma)
__CUDAMAGIC_MATH_1(tgamma) __CUDAMAGIC_MATH_1(ceil) __CUDAMAGIC_MATH_1(floor)
__CUDAMAGIC_MATH_1(nearbyint) __CUDAMAGIC_MATH_1(rint) __CUDAMAGIC_MATH_1(lrint)
__CUDAMAGIC_MATH_1(llrint) __CUDAMAGIC_MATH_1(round) __CUDAMAGIC_MATH_1(lround)
__CUDAMAGIC_MATH_1(llround) __CUDAMAGIC_MATH_1(trunc)
__CUDAMAGIC_MATH_1(isfinite) __CUDAMAGIC_MATH_1(isinf) __CUDAMAGIC_MATH_1(isnan)
__CUDAMAGIC_MATH_1(signbit)
__CUDAMAGIC_MATH_2(atan2) __CUDAMAGIC_MATH_2(pow) __CUDAMAGIC_MATH_2(hypot)
__CUDAMAGIC_MATH_2(fmod) __CUDAMAGIC_MATH_2(remainder) __CUDAMAGIC_MATH_2(copysign)
__CUDAMAGIC_MATH_2(nextafter) __CUDAMAGIC_MATH_2(fdim) __CUDAMAGIC_MATH_2(fmax)
__CUDAMAGIC_MATH_2(fmin)
__CUDAMAGIC_MATH_3(fma)
__CUDAMAGIC_MATH_1_AND(frexp, int*) __CUDAMAGIC_MATH_1_AND(ldexp, int)
__CUDAMAGIC_MATH_1_AND(scalbn, int) __CUDAMAGIC_MATH_1_AND(scalbln, long)

template <class A, class B, __cudamagic_math::if_double<A, B> = 0>
__host__ __device__ inline double remquo(A a, B b, int* quo)
{ return ::remquo(static_cast<double>(a), static_cast<double>(b), quo); }

// C++17's hypot of three, which NVRTC has as norm3d (it avoids overflow as hypot does)
__host__ __device__ inline float hypot(float x, float y, float z) { return ::norm3df(x, y, z); }
__host__ __device__ inline double hypot(double x, double y, double z) { return ::norm3d(x, y, z); }
__CUDAMAGIC_MATH_3(hypot)

// nexttoward, which NVRTC lacks: one step from x in y's direction, y itself when they are equal
template <class T>
__host__ __device__ inline T __cudamagic_nexttoward(T x, long double y) {
  return x < y ? ::nextafter(x, ::cuda::std::numeric_limits<T>::infinity())
       : x > y ? ::nextafter(x, -::cuda::std::numeric_limits<T>::infinity())
       : static_cast<T>(x == y ? y : x + y);
}
__host__ __device__ inline float nexttoward(float x, long double y)
{ return __cudamagic_nexttoward(x, y); }
__host__ __device__ inline double nexttoward(double x, long double y)
{ return __cudamagic_nexttoward(x, y); }
template <class A, __cudamagic_math::if_double<A> = 0>
__host__ __device__ inline double nexttoward(A x, long double y)
{ return __cudamagic_nexttoward(static_cast<double>(x), y); }
__host__ __device__ inline float nexttowardf(float x, long double y)
{ return __cudamagic_nexttoward(x, y); }

namespace std { using ::abs; using ::fabs; using ::fmod; using ::remainder; using ::remquo;
  using ::fma; using ::fmax; using ::fmin; using ::fdim; using ::exp; using ::exp2;
  using ::expm1; using ::log; using ::log10; using ::log2; using ::log1p; using ::pow;
  using ::sqrt; using ::cbrt; using ::hypot; using ::sin; using ::cos; using ::tan;
  using ::asin; using ::acos; using ::atan; using ::atan2; using ::sinh; using ::cosh;
  using ::tanh; using ::asinh; using ::acosh; using ::atanh; using ::erf; using ::erfc;
  using ::tgamma; using ::lgamma; using ::ceil; using ::floor; using ::trunc; using ::round;
  using ::lround; using ::llround; using ::nearbyint; using ::rint; using ::lrint;
  using ::llrint; using ::frexp; using ::ldexp; using ::modf; using ::scalbn; using ::scalbln;
  using ::ilogb; using ::logb; using ::nextafter; using ::nexttoward; using ::copysign;
  using ::isfinite; using ::isinf; using ::isnan; using ::signbit; using ::nan; }
namespace std { using ::cuda::std::fpclassify; using ::cuda::std::isnormal;
  using ::cuda::std::isgreater; using ::cuda::std::isgreaterequal; using ::cuda::std::isless;
  using ::cuda::std::islessequal; using ::cuda::std::islessgreater;
  using ::cuda::std::isunordered; }
#if __cplusplus >= 202002L
namespace std { using ::cuda::std::lerp; }
#endif
// the float names C++17 lists in std:: too, and float_t and double_t (FLT_EVAL_METHOD is 0)
namespace std { using ::acosf; using ::asinf; using ::atanf; using ::atan2f; using ::cosf;
  using ::sinf; using ::tanf; using ::acoshf; using ::asinhf; using ::atanhf; using ::coshf;
  using ::sinhf; using ::tanhf; using ::expf; using ::exp2f; using ::expm1f; using ::frexpf;
  using ::ilogbf; using ::ldexpf; using ::logf; using ::log10f; using ::log1pf; using ::log2f;
  using ::logbf; using ::modff; using ::scalbnf; using ::scalblnf; using ::cbrtf; using ::fabsf;
  using ::hypotf; using ::powf; using ::sqrtf; using ::erff; using ::erfcf; using ::lgammaf;
  using ::tgammaf; using ::ceilf; using ::floorf; using ::nearbyintf; using ::rintf;
  using ::lrintf; using ::llrintf; using ::roundf; using ::lroundf; using ::llroundf;
  using ::truncf; using ::fmodf; using ::remainderf; using ::remquof; using ::copysignf;
  using ::nanf; using ::nextafterf; using ::nexttowardf; using ::fdimf; using ::fmaxf;
  using ::fminf; using ::fmaf; using float_t = float; using double_t = double; }

#undef __CUDAMAGIC_MATH_1
#undef __CUDAMAGIC_MATH_2
#undef __CUDAMAGIC_MATH_3
#undef __CUDAMAGIC_MATH_1_AND
