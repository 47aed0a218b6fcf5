/*
 * <hip/hip_runtime.h> for NVRTC: hip-core's `nvidia` platform hands this file to NVRTC as a
 * virtual header, so that portable HIP kernel sources compile unchanged for NVIDIA GPUs.
 *
 * NVRTC already provides every CUDA built-in that HIP shares with CUDA (threadIdx, blockIdx,
 * __syncthreads, atomics, math functions, warpSize, ...). This header only adds the few HIP
 * spellings that CUDA lacks:
 *   - the platform macro __HIP_PLATFORM_NVIDIA__ (and __HIP_DEVICE_COMPILE__ in device code);
 *   - HIP_DYNAMIC_SHARED(type, name), HIP's spelling of `extern __shared__ type name[]`;
 *   - the warp functions without a mask (__shfl, __shfl_up, __shfl_down, __shfl_xor, __ballot,
 *     __any, __all), which CUDA deprecated (sm_70+); they act on the full warp here.
 *
 * Written for hip-core (candle-rocm workspace), MIT OR Apache-2.0.
 */
#pragma once
#ifndef HIP_CORE_NVRTC_HIP_RUNTIME_H
#define HIP_CORE_NVRTC_HIP_RUNTIME_H

#ifndef __HIP_PLATFORM_NVIDIA__
#define __HIP_PLATFORM_NVIDIA__ 1
#endif

#if defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#define __HIP_DEVICE_COMPILE__ 1
#endif

/* Dynamic shared memory, sized by the launch's shared-memory argument. */
#define HIP_DYNAMIC_SHARED(type, name) extern __shared__ type name[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE

/* Every lane of a (32-wide) NVIDIA warp. */
#define HIP_CORE_FULL_WARP_MASK 0xffffffffu

/*
 * The maskless warp functions. CUDA still declares deprecated versions of some of them (with
 * other return types, e.g. a 32-bit __ballot), so ours get their own names and the HIP
 * spellings are macros: HIP code always reaches these, whatever CUDA declares.
 */
template <typename T>
__device__ __forceinline__ T hip_core_shfl(T var, int src_lane, int width = warpSize) {
    return __shfl_sync(HIP_CORE_FULL_WARP_MASK, var, src_lane, width);
}

template <typename T>
__device__ __forceinline__ T hip_core_shfl_up(T var, unsigned int lane_delta, int width = warpSize) {
    return __shfl_up_sync(HIP_CORE_FULL_WARP_MASK, var, lane_delta, width);
}

template <typename T>
__device__ __forceinline__ T hip_core_shfl_down(T var, unsigned int lane_delta, int width = warpSize) {
    return __shfl_down_sync(HIP_CORE_FULL_WARP_MASK, var, lane_delta, width);
}

template <typename T>
__device__ __forceinline__ T hip_core_shfl_xor(T var, int lane_mask, int width = warpSize) {
    return __shfl_xor_sync(HIP_CORE_FULL_WARP_MASK, var, lane_mask, width);
}

/* HIP's ballot is 64 bits wide (for 64-lane wavefronts); the upper half is zero here. */
__device__ __forceinline__ unsigned long long hip_core_ballot(int predicate) {
    return __ballot_sync(HIP_CORE_FULL_WARP_MASK, predicate);
}

__device__ __forceinline__ int hip_core_any(int predicate) {
    return __any_sync(HIP_CORE_FULL_WARP_MASK, predicate);
}

__device__ __forceinline__ int hip_core_all(int predicate) {
    return __all_sync(HIP_CORE_FULL_WARP_MASK, predicate);
}

#define __shfl(...) hip_core_shfl(__VA_ARGS__)
#define __shfl_up(...) hip_core_shfl_up(__VA_ARGS__)
#define __shfl_down(...) hip_core_shfl_down(__VA_ARGS__)
#define __shfl_xor(...) hip_core_shfl_xor(__VA_ARGS__)
#define __ballot(p) hip_core_ballot(p)
#define __any(p) hip_core_any(p)
#define __all(p) hip_core_all(p)

#endif /* HIP_CORE_NVRTC_HIP_RUNTIME_H */
