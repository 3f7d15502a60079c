#pragma once
// check_syntax.sh only: declarations standing in for the CUDA runtime and device built-ins, enough for g++ to
// parse and type-check the probes on a machine without CUDA. Never compiled into anything.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __shared__
#define __constant__
#define __align__(n)
#define __launch_bounds__(...)
#define __cluster_dims__(...)
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern dim3 threadIdx, blockIdx, blockDim, gridDim;
struct uint4 { unsigned x, y, z, w; }; struct uint2 { unsigned x, y; };
struct float4 { float x, y, z, w; }; struct float2 { float x, y; };
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline float2 make_float2(float a, float b) { return {a, b}; }
typedef int cudaError_t; typedef void* cudaEvent_t; typedef void* cudaStream_t;
enum { cudaSuccess = 0, cudaMemcpyDeviceToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToDevice,
       cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributeNonPortableClusterSizeAllowed, cudaDevAttrClockRate, cudaDevAttrMultiProcessorCount };
struct cudaDeviceProp { char name[256]; int multiProcessorCount; int l2CacheSize; };
struct cudaLaunchConfig_t { dim3 gridDim, blockDim; size_t dynamicSmemBytes; };
const char* cudaGetErrorString(int);
int cudaMalloc(void*, size_t); template <class T> int cudaMalloc(T**, size_t);
int cudaMemset(void*, int, size_t); int cudaMemcpy(void*, const void*, size_t, int);
template <class T> int cudaMemcpyToSymbol(const T&, const void*, size_t);
int cudaDeviceSynchronize(); int cudaGetLastError(); int cudaEventCreate(cudaEvent_t*); int cudaEventRecord(cudaEvent_t, cudaStream_t = 0);
int cudaEventSynchronize(cudaEvent_t); int cudaEventElapsedTime(float*, cudaEvent_t, cudaEvent_t); int cudaEventDestroy(cudaEvent_t);
int cudaFuncSetAttribute(const void*, int, int); template <class F> int cudaFuncSetAttribute(F*, int, int);
int cudaGetDeviceProperties(cudaDeviceProp*, int); int cudaDeviceGetAttribute(int*, int, int);
int cudaOccupancyMaxActiveClusters(int*, const void*, const cudaLaunchConfig_t*);
int cudaFree(void*);
void __syncthreads(); void __threadfence(); void __syncwarp(unsigned = 0xffffffffu); void __nanosleep(unsigned);
float __shfl_xor_sync(unsigned, float, int); unsigned __shfl_xor_sync(unsigned, unsigned, int);
template <class T> T __ldcg(const T*); template <class T> T __ldg(const T*); template <class T> T __ldcs(const T*);
float atomicAdd(float*, float); unsigned atomicAdd(unsigned*, unsigned); float4 atomicAdd(float4*, float4); float2 atomicAdd(float2*, float2);
unsigned atomicExch(unsigned*, unsigned); int atomicMax(int*, int); unsigned atomicMin(unsigned*, unsigned);
float __uint_as_float(unsigned); unsigned __float_as_uint(float); float __int_as_float(int);
#include <cmath>
float rsqrtf(float); long long clock64(); using std::min; using std::max;
int __all_sync(unsigned, int);
unsigned __cvta_generic_to_shared(const void*);
#define __CUDA_ARCH__ 900
