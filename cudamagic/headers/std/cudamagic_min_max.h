// cudamagic: std::min and std::max with <cmath>, as host standard libraries give them there
// (they belong to <algorithm>, which ported code often leaves out).
#pragma once
#if __has_include(<cuda/std/__algorithm/min.h>)
#include <cuda/std/__algorithm/min.h>
#include <cuda/std/__algorithm/max.h>
namespace std { using ::cuda::std::min; using ::cuda::std::max; }
#endif
