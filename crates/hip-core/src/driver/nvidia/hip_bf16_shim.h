/*
 * <hip/hip_bf16.h> for NVRTC (hip-core's `nvidia` platform): HIP's bfloat16 functions carry
 * CUDA's names (__float2bfloat16, __bfloat162float, __hadd, ...); only the types are spelled
 * differently (__hip_bfloat16 vs __nv_bfloat16).
 *
 * Written for hip-core (candle-rocm workspace), MIT OR Apache-2.0.
 */
#pragma once
#ifndef HIP_CORE_NVRTC_HIP_BF16_H
#define HIP_CORE_NVRTC_HIP_BF16_H

#include <cuda_bf16.h>

typedef __nv_bfloat16 __hip_bfloat16;
typedef __nv_bfloat162 __hip_bfloat162;
typedef __nv_bfloat16_raw __hip_bfloat16_raw;
typedef __nv_bfloat162_raw __hip_bfloat162_raw;

#endif /* HIP_CORE_NVRTC_HIP_BF16_H */
