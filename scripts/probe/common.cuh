// What the probes share: the model's shape, PTX wrappers, the floor, random fill.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (x);                                                        \
    if (e_ != cudaSuccess) {                                                     \
      printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

typedef __nv_bfloat16 bf16;

// ---- the model's shape (Qwen3-0.6B) ----
constexpr int LAYERS = 28, HIDDEN = 1024, HEADS = 16, KVH = 8, HD = 128, INTER = 3072,
              VOCAB = 151936;
constexpr int QDIM = HEADS * HD, QKV_ROWS = (HEADS + 2 * KVH) * HD;  // 2048, 4096
constexpr float EPS = 1e-6f;

// ---- PTX helpers ----
__device__ __forceinline__ unsigned sa(const void* p) {
  return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(unsigned long long* b, unsigned n) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(sa(b)), "r"(n));
}
__device__ __forceinline__ void mbar_wait(unsigned long long* b, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(sa(b)), "r"(parity)
        : "memory");
}
__device__ __forceinline__ bool mbar_test(unsigned long long* b, unsigned parity) {
  unsigned done;
  asm volatile(
      "{ .reg .pred p; mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
      : "=r"(done)
      : "r"(sa(b)), "r"(parity)
      : "memory");
  return done;
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(sa(b)) : "memory");
}
__device__ __forceinline__ void mbar_expect(unsigned long long* b, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sa(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, unsigned bytes, unsigned long long* b) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(sa(dst)),
      "l"(src), "r"(bytes), "r"(sa(b))
      : "memory");
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void red_release(unsigned* p, unsigned v) {
  asm volatile("fence.acq_rel.gpu;\n red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
// The generated kernel's publish: a release add, no fence before it.
__device__ __forceinline__ void publish(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// Four floats added at p with one vector reduction (sm_90, PTX 8.1), as the generated
// kernels' `vector_atomics`.
__device__ __forceinline__ void red_v4(float* p, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(v.x), "f"(v.y), "f"(v.z),
               "f"(v.w)
               : "memory");
}
// %globaltimer, in ns (it steps by more: hop_parts measures by how much).
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
// Named barrier 1 over the consumer warps only (the producer never joins it).
__device__ __forceinline__ void consumers_sync(int nthreads) {
  asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
}
// ---- clusters (sm_90) ----
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// One arrival on CTA `rank`'s barrier at the same shared address as `bar`.
__device__ __forceinline__ void arrive_remote(unsigned long long* bar, unsigned rank) {
  asm volatile(
      "{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, %1;\n"
      "  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [r]; }" ::"r"(sa(bar)),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void wait_cluster(unsigned long long* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
        "  selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(sa(bar)), "r"(parity)
        : "memory");
}
// A probe's stand-in for a weight tile's work: two of its words as floats.
__device__ __forceinline__ float fold(uint4 r) {
  return __uint_as_float(r.x & 0x3f800000u) + __uint_as_float(r.w & 0x3f800000u);
}
__device__ __forceinline__ float bf(bf16 v) { return __bfloat162float(v); }
// Activations written by other CTAs: read at L2 (ld.global.cg), never from a stale L1 line.
__device__ __forceinline__ float ldcg_bf(const bf16* p) {
  return __bfloat162float(__ushort_as_bfloat16(__ldcg((const unsigned short*)p)));
}
__device__ __forceinline__ void unpack8(uint4 u, float* f) {
  const __nv_bfloat162* h = (const __nv_bfloat162*)&u;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// ---- the floor: a plain read of the same bytes ----
__global__ void stream_read(const uint4* p, size_t n, unsigned* out) {
  unsigned acc = 0;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    uint4 a = __ldcs(p + i), b = __ldcs(p + i + stride), c = __ldcs(p + i + 2 * stride), d = __ldcs(p + i + 3 * stride);
    acc ^= a.x ^ b.y ^ c.z ^ d.w;
  }
  for (; i < n; i += stride) acc ^= __ldcs(p + i).x;
  if (acc == 0x9e3779b9u) out[0] = acc;
}

__global__ void fill_random(bf16* p, size_t n, unsigned seed, float scale, float bias) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)(i * 2654435761u) ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    p[i] = __float2bfloat16(bias + scale * ((h & 0xffffff) / 8388608.f - 1.f));
  }
}

template <typename T>
static T median(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One launch's time in ms (events around it; its errors checked).
template <typename F>
float launch_ms(F&& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaEventRecord(a));
  launch();
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  CHECK(cudaGetLastError());
  float ms;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ms;
}

// A launch's median time in ms over `reps` runs, after 3 warm-up runs.
template <typename F>
float median_ms(F&& launch, int reps) {
  for (int w = 0; w < 3; ++w) launch();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) ms.push_back(launch_ms(launch));
  return median(ms);
}

// ---- what both references use: a block-wide sum, and the attention stand-in at context 1
// (softmax over one position is 1: out = v of the head's KV group) ----
__device__ float block_sum(float v) {
  __shared__ float red[32];
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  float t = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
  t = warp_sum(t);
  __syncthreads();
  return t;
}
__global__ void ref_attn(const bf16* qkv, bf16* attn) {
  const int h = blockIdx.x, g = h / (HEADS / KVH), d = threadIdx.x;
  attn[h * HD + d] = qkv[QDIM + KVH * HD + g * HD + d];
}
