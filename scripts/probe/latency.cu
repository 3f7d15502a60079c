// Does a weight stream in flight slow down the latency-bound loads of the same SM?
//   nvcc -O3 -arch=sm_90 -o latency latency.cu && ./latency
// One CTA of 512 threads per SM. Thread 0 chases pointers through a small L2-resident
// table (each load depends on the last, `ld.global.cg`: no L1), as a stage's activation
// reads and a sync's polls do; warps 1..15 meanwhile stream a 1 GiB buffer by one way:
//   none      (idle)
//   ldg       16-byte loads into registers
//   cpasync   cp.async into per-thread shared-memory slots, 4 groups deep
//   bulk      cp.async.bulk (TMA) 16 KiB tiles, 4 deep, mbarrier completion
//   l2pf      prefetch.global.L2 (no data returns to the SM)
// Prints the chase's mean latency (cycles per load) and the stream's GB/s.
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 512, CHASE = 4000;

__device__ __forceinline__ unsigned smem_addr(const void* p) {
  unsigned a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1) probe(const int* __restrict__ table, const uint4* __restrict__ p,
                                                     size_t per_cta, unsigned long long* cycles, unsigned long long* streamed) {
  extern __shared__ __align__(128) unsigned char sm[];
  __shared__ volatile int done;
  __shared__ __align__(8) unsigned long long bar[4];
  if (threadIdx.x == 0) {
    done = 0;
    for (int s = 0; s < 4; ++s) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int j = blockIdx.x * 7;
    // warm up
    for (int i = 0; i < 64; ++i) asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(j) : "l"(table + j));
    const long long t0 = clock64();
    for (int i = 0; i < CHASE; ++i) asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(j) : "l"(table + j));
    const long long t1 = clock64();
    cycles[blockIdx.x] = (t1 - t0) + (j == -1);
    done = 1;
    return;
  }
  if (threadIdx.x < 32) return;
  const int t = threadIdx.x - 32, T = THREADS - 32;
  const unsigned char* base = (const unsigned char*)p + blockIdx.x * per_cta;
  unsigned acc = 0;
  size_t got = 0;
  if (MODE == 1) {
    for (size_t off = 0; off + 4 * 16 * T <= per_cta && !done; off += 4 * 16 * T) {
      uint4 r[4];
#pragma unroll
      for (int v = 0; v < 4; ++v) r[v] = *(const uint4*)(base + off + (v * T + t) * 16);
#pragma unroll
      for (int v = 0; v < 4; ++v) acc ^= r[v].x ^ r[v].w;
      got += 4 * 16 * T;
    }
  } else if (MODE == 2) {
    const size_t tile = 16 * T;
    size_t issued = 0, used = 0;
    auto issue = [&]() {
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(smem_addr(sm + (issued % 4) * tile + t * 16)),
                   "l"(base + issued * tile + t * 16) : "memory");
      asm volatile("cp.async.commit_group;" ::: "memory");
      ++issued;
    };
    for (int s = 0; s < 3; ++s) issue();
    while ((used + 4) * tile <= per_cta && !done) {
      issue();
      asm volatile("cp.async.wait_group 3;" ::: "memory");
      acc ^= ((const uint4*)(sm + (used % 4) * tile))[t].x;
      ++used;
      got += tile;
    }
    asm volatile("cp.async.wait_group 0;" ::: "memory");
  } else if (MODE == 3) {
    // warp 1 lane 0 issues, warps 1..15 read
    const unsigned TILE = 16384;
    size_t n = 0;
    auto issue = [&](size_t i) {
      const int s = i % 4;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(&bar[s])), "r"(TILE) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(smem_addr(sm + s * TILE)), "l"(base + i * TILE), "r"(TILE), "r"(smem_addr(&bar[s])) : "memory");
    };
    if (t == 0)
      for (int s = 0; s < 4; ++s) issue(s);
    for (n = 0; (n + 4) * TILE <= per_cta; ++n) {
      unsigned ok = 0;
      while (!ok)
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(ok) : "r"(smem_addr(&bar[n % 4])), "r"((unsigned)((n / 4) & 1)) : "memory");
      acc ^= ((const unsigned*)(sm + (n % 4) * TILE))[t];
      asm volatile("bar.sync 1, %0;" ::"r"(T));
      got += TILE;
      const bool stop = done;
      asm volatile("bar.sync 1, %0;" ::"r"(T));
      if (stop) break;
      if (t == 0) issue(n + 4);
    }
    // drain what is in flight
    for (size_t k = n + 1; k < n + 4 && (k + 4) * TILE <= per_cta + 4 * TILE; ++k) {
      unsigned ok = 0;
      while (!ok)
        asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; selp.u32 %0, 1, 0, q; }"
                     : "=r"(ok) : "r"(smem_addr(&bar[k % 4])), "r"((unsigned)((k / 4) & 1)) : "memory");
    }
  } else if (MODE == 4) {
    for (size_t off = 0; off + 128 * T <= per_cta && !done; off += 128 * T) {
      asm volatile("prefetch.global.L2 [%0];" ::"l"(base + off + t * 128));
      got += 128 * T;
    }
  }
  if (t == 0) streamed[blockIdx.x] = got;
  if (acc == 0x12345678u) streamed[0] = acc;
}

int main() {
  int sms;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const size_t total = size_t(1) << 30, per_cta = total / sms / 65536 * 65536;
  uint4* p;
  int* table;
  unsigned long long *cyc, *str;
  cudaMalloc(&p, total);
  cudaMemset(p, 1, total);
  const int n = 1 << 16;  // 256 KiB: L2-resident
  int* h = new int[n];
  for (int i = 0; i < n; ++i) h[i] = (int)((i * 2654435761u + 977) % n);  // a scatter through 32 B sectors
  cudaMalloc(&table, n * 4);
  cudaMemcpy(table, h, n * 4, cudaMemcpyHostToDevice);
  cudaMalloc(&cyc, sms * 8);
  cudaMalloc(&str, sms * 8);
  const size_t smem = 4 * 16384 > 4 * 16 * (THREADS - 32) ? 4 * 16384 : 4 * 16 * (THREADS - 32);
  const char* names[] = {"none", "ldg", "cpasync", "bulk", "l2pf"};
  void (*ks[])(const int*, const uint4*, size_t, unsigned long long*, unsigned long long*) = {probe<0>, probe<1>, probe<2>, probe<3>, probe<4>};
  for (int m = 0; m < 5; ++m) {
    cudaFuncSetAttribute(ks[m], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    for (int rep = 0; rep < 2; ++rep) {
      cudaEvent_t a, b;
      cudaEventCreate(&a);
      cudaEventCreate(&b);
      cudaEventRecord(a);
      ks[m]<<<sms, THREADS, smem>>>(table, p, per_cta, cyc, str);
      cudaEventRecord(b);
      cudaEventSynchronize(b);
      float ms;
      cudaEventElapsedTime(&ms, a, b);
      unsigned long long hc[200], hs[200];
      cudaMemcpy(hc, cyc, sms * 8, cudaMemcpyDeviceToHost);
      cudaMemcpy(hs, str, sms * 8, cudaMemcpyDeviceToHost);
      double c = 0, s = 0;
      for (int i = 0; i < sms; ++i) { c += hc[i]; s += hs[i]; }
      cudaError_t e = cudaGetLastError();
      if (rep == 1)
        printf("%-8s chase %6.0f cycles/load   stream %6.0f GB/s over %.3f ms %s\n", names[m], c / sms / CHASE,
               s / ms / 1e6, ms, e == cudaSuccess ? "" : cudaGetErrorString(e));
    }
  }
  return 0;
}
