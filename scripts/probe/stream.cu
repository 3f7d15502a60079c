// How fast can ONE persistent CTA per SM stream weights from DRAM, by each way of
// loading them? (The decode megakernel runs one 512-thread CTA per SM.)
//   nvcc -O3 -arch=sm_90 -o stream stream.cu && ./stream
// Each CTA reads its contiguous share of a 1 GiB buffer in tiles of TILE bytes and folds
// every 16-byte vector into a checksum (so nothing is optimised away):
//   ldg      plain 16-byte loads into registers, one tile at a time
//   ldg2     two tiles in flight (loads of tile i+1 issued before tile i is summed)
//   cpasync  cp.async (LDGSTS) into a ring of STAGES tiles of shared memory, per-thread slots
//   bulk     cp.async.bulk (TMA, one thread) into a ring of STAGES tiles, mbarrier completion
// Prints GB/s of each, and the device-to-device copy bandwidth for reference.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

constexpr int THREADS = 512;

__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

template <int TILE>
__global__ void __launch_bounds__(THREADS, 1) ldg(const uint4* __restrict__ p, size_t per_cta, unsigned* out) {
  constexpr int V = TILE / 16 / THREADS;
  const uint4* base = p + blockIdx.x * (per_cta / 16);
  unsigned acc = 0;
  for (size_t t = 0; t < per_cta / TILE; ++t) {
    uint4 r[V];
#pragma unroll
    for (int v = 0; v < V; ++v) r[v] = base[t * (TILE / 16) + v * THREADS + threadIdx.x];
#pragma unroll
    for (int v = 0; v < V; ++v) acc += fold(r[v]);
    __syncthreads();  // a program boundary, as in the megakernel
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <int TILE>
__global__ void __launch_bounds__(THREADS, 1) ldg2(const uint4* __restrict__ p, size_t per_cta, unsigned* out) {
  constexpr int V = TILE / 16 / THREADS;
  const uint4* base = p + blockIdx.x * (per_cta / 16);
  const size_t n = per_cta / TILE;
  unsigned acc = 0;
  uint4 cur[V], nxt[V];
#pragma unroll
  for (int v = 0; v < V; ++v) cur[v] = base[v * THREADS + threadIdx.x];
  for (size_t t = 0; t < n; ++t) {
    if (t + 1 < n) {
#pragma unroll
      for (int v = 0; v < V; ++v) nxt[v] = base[(t + 1) * (TILE / 16) + v * THREADS + threadIdx.x];
    }
#pragma unroll
    for (int v = 0; v < V; ++v) acc += fold(cur[v]);
    __syncthreads();
#pragma unroll
    for (int v = 0; v < V; ++v) cur[v] = nxt[v];
  }
  if (acc == 0x12345678u) out[0] = acc;
}

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

template <int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS, 1) cpasync(const uint4* __restrict__ p, size_t per_cta, unsigned* out) {
  constexpr int V = TILE / 16 / THREADS;
  extern __shared__ __align__(128) unsigned char sm[];
  const uint4* base = p + blockIdx.x * (per_cta / 16);
  const size_t n = per_cta / TILE;
  auto issue = [&](size_t t) {
    unsigned char* dst = sm + (t % STAGES) * TILE;
#pragma unroll
    for (int v = 0; v < V; ++v)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(dst + (v * THREADS + threadIdx.x) * 16)),
                   "l"(base + t * (TILE / 16) + v * THREADS + threadIdx.x) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  unsigned acc = 0;
  for (int s = 0; s < STAGES - 1; ++s) issue(s);
  for (size_t t = 0; t < n; ++t) {
    if (t + STAGES - 1 < n) issue(t + STAGES - 1);
    else asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group %0;" ::"n"(STAGES - 1) : "memory");
    const unsigned char* src = sm + (t % STAGES) * TILE;
#pragma unroll
    for (int v = 0; v < V; ++v) acc += fold(*(const uint4*)(src + (v * THREADS + threadIdx.x) * 16));
    __syncthreads();
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <int TILE, int STAGES>
__global__ void __launch_bounds__(THREADS, 1) bulk(const uint4* __restrict__ p, size_t per_cta, unsigned* out) {
  constexpr int V = TILE / 16 / THREADS;
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ __align__(8) unsigned long long bar[STAGES];
  const unsigned char* base = (const unsigned char*)p + blockIdx.x * per_cta;
  const size_t n = per_cta / TILE;
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  auto issue = [&](size_t t) {
    const int s = t % STAGES;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])), "r"(TILE) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(smem_addr(sm + s * TILE)), "l"(base + t * TILE), "r"(TILE), "r"(smem_addr(&bar[s])) : "memory");
  };
  unsigned acc = 0;
  if (threadIdx.x == 0)
    for (int s = 0; s < STAGES && s < (int)n; ++s) issue(s);
  for (size_t t = 0; t < n; ++t) {
    const int s = t % STAGES;
    const unsigned parity = (t / STAGES) & 1;
    unsigned done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(smem_addr(&bar[s])), "r"(parity) : "memory");
    const unsigned char* src = sm + s * TILE;
#pragma unroll
    for (int v = 0; v < V; ++v) acc += fold(*(const uint4*)(src + (v * THREADS + threadIdx.x) * 16));
    __syncthreads();
    if (threadIdx.x == 0 && t + STAGES < n) issue(t + STAGES);
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <typename K>
float time_it(K k, int ctas, size_t smem, const uint4* p, size_t per_cta, unsigned* out) {
  if (smem > 48 * 1024) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  k<<<ctas, THREADS, smem>>>(p, per_cta, out);
  float best = 1e30f;
  for (int r = 0; r < 10; ++r) {
    cudaEventRecord(a);
    k<<<ctas, THREADS, smem>>>(p, per_cta, out);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (ms < best) best = ms;
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) printf("  error: %s\n", cudaGetErrorString(e));
  return best;
}

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaDeviceProp prop;
  cudaGetDeviceProperties(&prop, 0);
  const size_t total = size_t(1) << 30;
  const size_t per_cta = (total / sms) / (64 * 1024) * (64 * 1024);
  uint4* p;
  unsigned* out;
  CHECK(cudaMalloc(&p, total));
  CHECK(cudaMalloc(&out, 4));
  CHECK(cudaMemset(p, 1, total));
  const double bytes = double(per_cta) * sms;
  printf("%s, %d SMs, one CTA of %d threads per SM, %.0f MB streamed\n", prop.name, sms, THREADS, bytes / 1e6);
  {
    uint4* q;
    CHECK(cudaMalloc(&q, total));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float best = 1e30f;
    for (int r = 0; r < 5; ++r) {
      cudaEventRecord(a);
      cudaMemcpy(q, p, total, cudaMemcpyDeviceToDevice);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      if (ms < best) best = ms;
    }
    printf("%-28s %7.0f GB/s (read + write)\n", "cudaMemcpy d2d", 2.0 * total / best / 1e6);
    cudaFree(q);
  }
#define RUN(name, k, smem) printf("%-28s %7.0f GB/s\n", name, bytes / time_it(k, sms, smem, p, per_cta, out) / 1e6)
  RUN("ldg 32K", ldg<32768>, 0);
  RUN("ldg 64K", ldg<65536>, 0);
  RUN("ldg2 32K", ldg2<32768>, 0);
  RUN("ldg2 64K", ldg2<65536>, 0);
  RUN("cpasync 32K x2", (cpasync<32768, 2>), 2 * 32768);
  RUN("cpasync 32K x4", (cpasync<32768, 4>), 4 * 32768);
  RUN("cpasync 32K x6", (cpasync<32768, 6>), 6 * 32768);
  RUN("cpasync 64K x3", (cpasync<65536, 3>), 3 * 65536);
  RUN("bulk 16K x4", (bulk<16384, 4>), 4 * 16384);
  RUN("bulk 32K x2", (bulk<32768, 2>), 2 * 32768);
  RUN("bulk 32K x4", (bulk<32768, 4>), 4 * 32768);
  RUN("bulk 32K x6", (bulk<32768, 6>), 6 * 32768);
  RUN("bulk 64K x3", (bulk<65536, 3>), 3 * 65536);
  return 0;
}
