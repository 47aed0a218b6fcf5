// rocm-kernels prelude: prepended to every module. Portable HIP: compiles with hip-clang and
// hipRTC on AMD and with NVRTC (through hip-core's virtual hip/*.h headers) on NVIDIA.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bf16.h>

typedef unsigned char u8;
typedef unsigned int u32;
typedef short i16;
typedef int i32;
typedef long long i64;
typedef unsigned long long u64;
typedef __half f16;
typedef __hip_bfloat16 bf16;
typedef float f32;
typedef double f64;

// Strided index: the offset, in elements, of the `i`-th element (row-major over `dims`) of an
// operand with `strides`. `info` holds dims[num_dims] then the operand's strides.
__device__ __forceinline__ u64 strided_offset(u64 i, u64 num_dims, const u64* dims,
                                              const u64* strides) {
    u64 offset = 0;
    for (long long d = (long long)num_dims - 1; d >= 0; --d) {
        u64 dim = dims[d];
        offset += (i % dim) * strides[d];
        i /= dim;
    }
    return offset;
}
