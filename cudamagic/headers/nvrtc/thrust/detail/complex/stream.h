// cudamagic: stands in for CCCL's thrust/detail/complex/stream.h, which declares
// operator<< and operator>> of thrust::complex on std::basic_ostream and std::basic_istream:
// host functions, which NVRTC refuses ("host functions are not allowed in JIT mode"), so that
// <thrust/complex.h> could not compile at all. Device code has no streams: nothing is lost.
#pragma once
