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

// each function and its float name (C++17 lists std::sqrtf too)
#define __CUDAMAGIC_STD(name) using ::name; using ::name##f;
namespace std { using ::abs; using ::isfinite; using ::isinf; using ::isnan; using ::signbit;
  __CUDAMAGIC_STD(fabs) __CUDAMAGIC_STD(fmod) __CUDAMAGIC_STD(remainder) __CUDAMAGIC_STD(remquo)
  __CUDAMAGIC_STD(fma) __CUDAMAGIC_STD(fmax) __CUDAMAGIC_STD(fmin) __CUDAMAGIC_STD(fdim)
  __CUDAMAGIC_STD(exp) __CUDAMAGIC_STD(exp2) __CUDAMAGIC_STD(expm1) __CUDAMAGIC_STD(log)
  __CUDAMAGIC_STD(log10) __CUDAMAGIC_STD(log2) __CUDAMAGIC_STD(log1p) __CUDAMAGIC_STD(pow)
  __CUDAMAGIC_STD(sqrt) __CUDAMAGIC_STD(cbrt) __CUDAMAGIC_STD(hypot) __CUDAMAGIC_STD(sin)
  __CUDAMAGIC_STD(cos) __CUDAMAGIC_STD(tan) __CUDAMAGIC_STD(asin) __CUDAMAGIC_STD(acos)
  __CUDAMAGIC_STD(atan) __CUDAMAGIC_STD(atan2) __CUDAMAGIC_STD(sinh) __CUDAMAGIC_STD(cosh)
  __CUDAMAGIC_STD(tanh) __CUDAMAGIC_STD(asinh) __CUDAMAGIC_STD(acosh) __CUDAMAGIC_STD(atanh)
  __CUDAMAGIC_STD(erf) __CUDAMAGIC_STD(erfc) __CUDAMAGIC_STD(tgamma) __CUDAMAGIC_STD(lgamma)
  __CUDAMAGIC_STD(ceil) __CUDAMAGIC_STD(floor) __CUDAMAGIC_STD(trunc) __CUDAMAGIC_STD(round)
  __CUDAMAGIC_STD(lround) __CUDAMAGIC_STD(llround) __CUDAMAGIC_STD(nearbyint)
  __CUDAMAGIC_STD(rint) __CUDAMAGIC_STD(lrint) __CUDAMAGIC_STD(llrint) __CUDAMAGIC_STD(frexp)
  __CUDAMAGIC_STD(ldexp) __CUDAMAGIC_STD(modf) __CUDAMAGIC_STD(scalbn) __CUDAMAGIC_STD(scalbln)
  __CUDAMAGIC_STD(ilogb) __CUDAMAGIC_STD(logb) __CUDAMAGIC_STD(nextafter)
  __CUDAMAGIC_STD(nexttoward) __CUDAMAGIC_STD(copysign) __CUDAMAGIC_STD(nan)
  using float_t = float; using double_t = double; }  // FLT_EVAL_METHOD is 0
#undef __CUDAMAGIC_STD
namespace std { using ::cuda::std::fpclassify; using ::cuda::std::isnormal;
  using ::cuda::std::isgreater; using ::cuda::std::isgreaterequal; using ::cuda::std::isless;
  using ::cuda::std::islessequal; using ::cuda::std::islessgreater;
  using ::cuda::std::isunordered; }
#if __cplusplus >= 202002L
namespace std { using ::cuda::std::lerp; }
#endif

#undef __CUDAMAGIC_MATH_1
#undef __CUDAMAGIC_MATH_2
#undef __CUDAMAGIC_MATH_3
#undef __CUDAMAGIC_MATH_1_AND
