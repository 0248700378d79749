// cudamagic: <assert.h> for NVRTC device code, which has no C++ standard library. NVRTC
// has assert() built in; this header redefines it on each inclusion, as the standard's does,
// so that NDEBUG defined before it turns assert() off. A failed assert() in a kernel stops it
// with the expression, the file and the line (the launch then reports an error).
// No #pragma once: the standard header is included again for each NDEBUG setting.
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : __assertfail(#e, __FILE__, __LINE__, __func__, sizeof(char)))
#endif
