/*
 * <hip/hip_fp16.h> for NVRTC (hip-core's `nvidia` platform): HIP's half-precision types and
 * functions carry the same names as CUDA's (__half, __half2, half, half2, __half_raw,
 * __float2half, __hadd, hexp, ...), so this header forwards to <cuda_fp16.h>.
 *
 * Written for hip-core (candle-rocm workspace), MIT OR Apache-2.0.
 */
#pragma once
#ifndef HIP_CORE_NVRTC_HIP_FP16_H
#define HIP_CORE_NVRTC_HIP_FP16_H

#include <cuda_fp16.h>

/* HIP always provides the short names; a repeated typedef of the same type is valid C++. */
typedef __half half;
typedef __half2 half2;

#endif /* HIP_CORE_NVRTC_HIP_FP16_H */
