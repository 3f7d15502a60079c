// What does a megakernel hop cost, and what shortens it? A hop today: the last CTA of a
// stage publishes (bar.sync, then `red.release.gpu` on a counter), every CTA's thread 0
// polls that counter with `ld.acquire.gpu`, and only then loads the stage's weights, so the
// weight stream drains and refills at every hop.
//   nvcc -O3 -DCL=8 -gencode=arch=compute_90a,code=sm_90a -o cluster_hops cluster_hops.cu && ./cluster_hops
// One CTA of 512 threads per SM, 128 CTAs, the 0.6B layer's shape scaled to fit two
// stages' weights in shared memory: 28 layers x 3 stages (QKV: 56 KiB of weights a CTA,
// 32 floats stored; attention + o_proj: 29 KiB, 256 floats added atomically; MLP: 132 KiB,
// 1024 floats added), each stage's weights summed, the atomics into a hot vector, then the
// publish. Modes (how a stage waits for the last one's publish, and where its weights are):
//   0 nowait    no waits: the stream + compute ceiling (the numbers are wrong, not the time)
//   1 global    every CTA's thread 0 polls the counter, then loads its weights (the
//               generated kernel's hop at 0.6B)
//   2 cl-mbar   rank 0 of each cluster of CL polls, then arrives on every CTA's mbarrier in
//               its cluster through distributed shared memory; the others wait on theirs
//   3 cl-flag   the same with a flag: rank 0 stores the step into each CTA's shared word
//               (`st.release.cluster`), each CTA spins on its own (`ld.acquire.cluster`)
//   4 first     global, the stage's first 32 KiB loaded into registers before the wait
//   5 staged    global, the stage's weights bulk-copied into shared memory before the wait
//   6 ahead     global, the NEXT stage's weights bulk-copied into shared memory when a stage
//               starts (its own were copied one stage earlier): the stream runs on through
//               the hop
//   7 ahead-nw  6 with no waits (the ceiling of reading the weights from shared memory)
//   8 stores    global, the outputs plain stores into this CTA's own slots, no atomics
//               (what the publish's release waits for when nothing contends)
//   9 silent    global, no outputs at all (the hop with nothing for the release to wait on)
//  10 sharded   the counter split over SHARDS words on their own lines: CTA c adds to word
//               c % SHARDS, and lanes 0..SHARDS-1 of warp 0 poll one word each
// Prints each mode's median ms a launch, its read bandwidth and its overhead a hop
// against mode 0.
#include "common.cuh"

#ifndef CL
#define CL 8
#endif
constexpr int THREADS = 512, CTAS = 128, STAGES = 3, HOT = 1024, MODES = 11, SHARDS = 16;  // LAYERS: common.cuh
// Per stage: weight bytes a CTA, floats it adds (atomically) into the hot vector, and where
// its weights sit in shared memory (any two consecutive stages' regions are disjoint).
__device__ __constant__ int W_BYTES[STAGES] = {56 * 1024, 29 * 1024, 132 * 1024};
__device__ __constant__ int ADDS[STAGES] = {32, 256, 1024};
__device__ __constant__ int REGION[STAGES] = {132 * 1024, 188 * 1024, 0};
constexpr int SMEM = 217 * 1024, CHUNK = 16 * 1024;
static_assert(CTAS % SHARDS == 0 && SHARDS <= 32, "each shard counts CTAS / SHARDS CTAs, one lane a shard");

__device__ __forceinline__ unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void store_remote(unsigned* word, unsigned rank, unsigned v) {
  asm volatile(
      "{ .reg .b32 r; mapa.shared::cluster.u32 r, %0, %1;\n"
      "  st.release.cluster.shared::cluster.u32 [r], %2; }" ::"r"(sa(word)),
      "r"(rank), "r"(v)
      : "memory");
}
__device__ __forceinline__ unsigned ld_acquire_cluster(const unsigned* word) {
  unsigned v;
  asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(v) : "r"(sa(word)) : "memory");
  return v;
}
// The bulk copies of `bytes` from `src` into shared `dst`, completing on `bar` (thread 0).
__device__ __forceinline__ void stage_in(void* dst, const void* src, int bytes, unsigned long long* bar) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after the generic reads of dst
  mbar_expect(bar, bytes);
  for (int o = 0; o < bytes; o += CHUNK)
    bulk_copy((char*)dst + o, (const char*)src + o, bytes - o < CHUNK ? bytes - o : CHUNK, bar);
}

extern __shared__ __align__(128) unsigned char slab[];  // two stages' weights (modes 5-7)
__shared__ __align__(8) unsigned long long bar[STAGES];  // a stage's weights in (5, 6, 7)
__shared__ __align__(8) unsigned long long hop;            // the hop's news (2)
__shared__ unsigned flag;                                  // the hop's news (3)
__shared__ float part[THREADS / 32];

// Every barrier this CTA uses, once (thread 0).
__device__ __noinline__ void init_barriers() {
  mbar_init(&bar[0], 1);
  mbar_init(&bar[1], 1);
  mbar_init(&bar[2], 1);
  mbar_init(&hop, 1);
  flag = 0;
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// This CTA's slice of stage s of layer l (one layer's windows after another: the stream
// never repeats within a launch).
__device__ __forceinline__ const char* src(const uint4* w, int l, int s) {
  size_t layer_bytes = 0, off = 0;
  for (int k = 0; k < STAGES; ++k) layer_bytes += (size_t)W_BYTES[k] * CTAS;
  for (int k = 0; k < s; ++k) off += (size_t)W_BYTES[k] * CTAS;
  return (const char*)w + (size_t)l * layer_bytes + off + (size_t)blockIdx.x * W_BYTES[s];
}

template <int MODE>
__device__ __forceinline__ void hops(const uint4* __restrict__ w, float* hot, unsigned* sync, float* sink) {
  constexpr bool CLUSTER = MODE == 2 || MODE == 3, SMEM_W = MODE >= 5 && MODE <= 7;
  constexpr bool WAITS = MODE != 0 && MODE != 7;
  const int tid = threadIdx.x;
  if (tid == 0) init_barriers();
  if (CLUSTER)
    cluster_sync();
  else
    __syncthreads();
  const unsigned rank = CLUSTER ? cluster_rank() : 0;
  if ((MODE == 6 || MODE == 7) && tid == 0) stage_in(slab + REGION[0], src(w, 0, 0), W_BYTES[0], &bar[0]);
  float acc = 0.f;
  unsigned hop_phase = 0, phase[STAGES] = {0, 0, 0};
  for (int layer = 0; layer < LAYERS; ++layer) {
    for (int s = 0; s < STAGES; ++s) {
      const unsigned step = layer * STAGES + s;  // publishes so far, per CTA
      const uint4* p = (const uint4*)src(w, layer, s);
      const int n16 = W_BYTES[s] / 16;
      // Before the wait: what needs no other CTA.
      uint4 first[4];
      if (MODE == 4) {
#pragma unroll
        for (int v = 0; v < 4; ++v) first[v] = tid + v * THREADS < n16 ? p[tid + v * THREADS] : make_uint4(0, 0, 0, 0);
      }
      if (MODE == 5 && tid == 0) stage_in(slab + REGION[s], p, W_BYTES[s], &bar[s]);
      if ((MODE == 6 || MODE == 7) && tid == 0 && step + 1 < LAYERS * STAGES) {
        const int ns = (s + 1) % STAGES, nl = layer + (s + 1) / STAGES;
        stage_in(slab + REGION[ns], src(w, nl, ns), W_BYTES[ns], &bar[ns]);
      }
      // The wait: every CTA has published `step` times.
      if (MODE == 10 && step > 0) {
        if (tid < 32) {
          const unsigned* word = sync + (tid % SHARDS) * 32;
          while (!__all_sync(0xffffffffu, tid >= SHARDS || ld_acquire(word) >= step * (CTAS / SHARDS))) {
          }
        }
        __syncthreads();
      } else if (WAITS && step > 0) {
        if (tid == 0) {
          if (!CLUSTER) {
            while (ld_acquire(sync) < step * CTAS) {
            }
          } else {
            if (rank == 0) {
              while (ld_acquire(sync) < step * CTAS) {
              }
              for (unsigned r = 0; r < CL; ++r) {
                if (MODE == 2) arrive_remote(&hop, r);
                if (MODE == 3) store_remote(&flag, r, step);
              }
            }
            if (MODE == 2) wait_cluster(&hop, hop_phase);
            if (MODE == 3)
              while (ld_acquire_cluster(&flag) < step) {
              }
          }
        }
        hop_phase ^= 1;
        __syncthreads();
      }
      // The stage: read the hot vector (the activations), the weights, reduce.
      float a = __ldcg(hot + (tid % HOT));
      if (SMEM_W) {
        mbar_wait(&bar[s], phase[s]);
        phase[s] ^= 1;
        const uint4* q = (const uint4*)(slab + REGION[s]);
        for (int i = tid; i < n16; i += THREADS) a += fold(q[i]);
      } else {
        int i0 = tid;
        if (MODE == 4) {
#pragma unroll
          for (int v = 0; v < 4; ++v) a += fold(first[v]);
          i0 += 4 * THREADS;
        }
        for (int i = i0; i < n16; i += 4 * THREADS) {
          uint4 r[4];
#pragma unroll
          for (int v = 0; v < 4; ++v) r[v] = i + v * THREADS < n16 ? p[i + v * THREADS] : make_uint4(0, 0, 0, 0);
#pragma unroll
          for (int v = 0; v < 4; ++v) a += fold(r[v]);
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (tid % 32 == 0) part[tid / 32] = a;
      __syncthreads();
      float tot = 0.f;
#pragma unroll
      for (int k = 0; k < THREADS / 32; ++k) tot += part[k];
      acc += tot;
      // Its outputs: atomics into the hot vector (o_proj's and down's residual adds).
      // (Warp 0 writes nothing: its thread 0 polls and, in a cluster, passes the news on
      // with release semantics, which would first wait for any write of its own.)
      if (tid >= 32 && tid - 32 < ADDS[s]) {
        if (MODE == 8)
          sink[CTAS + blockIdx.x * HOT + (tid - 32) % HOT] = tot;
        else if (MODE != 9)
          atomicAdd(hot + (blockIdx.x * 7 + tid) % HOT, tot * 1e-9f);
      }
      // The publish (every thread done with this stage's shared weights too).
      __syncthreads();
      if (tid == 32 && WAITS) publish(MODE == 10 ? sync + (blockIdx.x % SHARDS) * 32 : sync, 1);
    }
  }
  if (tid == 0) sink[blockIdx.x] = acc;
  if (CLUSTER) cluster_sync();  // no CTA leaves while another may still write its shared memory
}

// The generated kernel's launch (no cluster), and clusters of CL for modes 2 and 3.
template <int MODE>
__global__ void __launch_bounds__(THREADS, 1) hops_plain(const uint4* w, float* hot, unsigned* sync, float* sink) {
  hops<MODE>(w, hot, sync, sink);
}
template <int MODE>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, 1)
    hops_cluster(const uint4* w, float* hot, unsigned* sync, float* sink) {
  hops<MODE>(w, hot, sync, sink);
}


typedef void (*Kernel)(const uint4*, float*, unsigned*, float*);
static const Kernel KERNELS[MODES] = {hops_plain<0>,   hops_plain<1>, hops_cluster<2>, hops_cluster<3>,
                                      hops_plain<4>,   hops_plain<5>, hops_plain<6>,   hops_plain<7>,
                                      hops_plain<8>,   hops_plain<9>, hops_plain<10>};

static float run(int mode, const uint4* w, float* hot, unsigned* sync, float* sink) {
  CHECK(cudaMemset(sync, 0, SHARDS * 32 * 4));
  return launch_ms([&] {
    // (the cluster modes fit only without the shared memory)
    KERNELS[mode]<<<CTAS, THREADS, mode >= 5 && mode <= 7 ? SMEM : 0>>>(w, hot, sync, sink);
  });
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  const size_t layer_bytes = (56 + 29 + 132) * 1024ull * CTAS, bytes = layer_bytes * LAYERS;
  uint4* w;
  float *hot, *sink;
  unsigned* sync;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMemset(w, 0x3c, bytes));
  CHECK(cudaMalloc(&hot, HOT * 4));
  CHECK(cudaMemset(hot, 0, HOT * 4));
  CHECK(cudaMalloc(&sync, SHARDS * 32 * 4));
  CHECK(cudaMalloc(&sink, (CTAS + CTAS * HOT) * 4));  // each CTA's sum, then mode 8's slots
  for (int m = 0; m < MODES; ++m)
    CHECK(cudaFuncSetAttribute((const void*)KERNELS[m], cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
  {
    // Every CTA must be resident at once (the waits spin): CTAS / CL clusters of CL.
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CTAS);
    cfg.blockDim = dim3(THREADS);
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, (const void*)KERNELS[2], &cfg));
    printf("max active clusters of %d: %d (need %d)\n", CL, clusters, CTAS / CL);
    if (clusters < CTAS / CL) return 2;
  }
  printf("cluster_hops: %d CTAs x %d threads, clusters of %d, %d layers x %d stages, %.1f MB of weights\n", CTAS,
         THREADS, CL, LAYERS, STAGES, bytes / 1e6);
  const char* names[MODES] = {"nowait", "global", "cl-mbar", "cl-flag",  "first",
                              "staged", "ahead",  "ahead-nw", "stores", "silent", "sharded"};
  std::vector<float> t[MODES];
  for (int r = 0; r < reps + 2; ++r)  // interleaved; the first two rounds warm up
    for (int m = 0; m < MODES; ++m) {
      const float ms = run(m, w, hot, sync, sink);
      if (r >= 2) t[m].push_back(ms);
    }
  float med[MODES];
  for (int m = 0; m < MODES; ++m) {
    std::sort(t[m].begin(), t[m].end());
    med[m] = t[m][t[m].size() / 2];
  }
  const int hops_n = LAYERS * STAGES - 1;
  for (int m = 0; m < MODES; ++m)
    printf("%-8s %.4f ms a launch (min %.4f, max %.4f), %.1f GB/s; %.3f us a hop over nowait\n", names[m], med[m],
           t[m].front(), t[m].back(), bytes / (med[m] * 1e6), (med[m] - med[0]) * 1e3 / hops_n);
  return 0;
}
