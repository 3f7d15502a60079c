// Where does a megakernel hop's time go? cluster_hops.cu (session 30) put a hop at 1.66 µs,
// ~1.2 of it "the sync itself"; but an L2 round trip under the weight stream is ~0.23 µs
// (latency.cu: 406 cycles). This probe stamps each CTA's publish and wake with %globaltimer
// to split a hop into the stragglers' spread (the last CTA's publish against the median's)
// and the signal's latency (the last publish to each CTA's wake), and tries what each part
// suggests.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o hop_parts hop_parts.cu && ./hop_parts
// One CTA of 512 threads per SM, 128 CTAs, 28 layers x 3 stages with the 0.6B layer's weight
// bytes a CTA (QKV 64 KiB, attention + o_proj 32, MLP 144), each stage's weights summed, a
// few atomics into a hot vector, then the publish (bar.sync, one `red.release.gpu`). Modes:
//   0 nowait       no waits: the stream + compute ceiling
//   1 global       thread 0 polls the counter with `ld.acquire.gpu` (the generated kernel)
//   2 stamped      1, each CTA stamping its publish and its wake (the split printed below)
//   3 tiny-nowait  0 with 1 KiB a stage: no stream
//   4 tiny         1 with 1 KiB a stage: the hop with nothing streaming
//   5 tiny-stamped 2 with 1 KiB a stage
//   6 mpoll        1 with lane 0 of warps 0..POLLERS-1 polling, POLL_GAP ns apart: the news
//                  seen sooner than a round trip after it lands
//   7 dyn          1 with each stage's weights cut in CHUNKS x 128 chunks that CTAs claim
//                  (an atomic ticket, the next one asked for while the current one streams):
//                  the fast CTAs take the slow ones' work
//   8 first-smem   1 with the stage's first 16 KiB bulk-copied into shared memory before the
//                  wait by thread 0 (no registers held across it), racing the publish
//   9 two-waits    1 with a poll of an already-satisfied word first (the generated QKV stage
//                  waits on the embedding's counter every layer)
//  10 first-reg    1 with the stage's first 32 KiB loaded into registers before the wait
//  11 pub-16k      8, the copy issued by the publishing thread right after its publish
//  12 pub-32k      11 with 32 KiB
//  13 pub-stage    11 with the whole stage (up to 144 KiB)
//  14 relaxed-poll 1 polling with `ld.relaxed.gpu`, one `fence.acq_rel.gpu` once it is seen
//  15 fence-red    1 publishing with `fence.acq_rel.gpu; red.relaxed.gpu`
//  16 l1pf         1, every thread putting its first 32 KiB share of the stage into L1
//                  (`prefetch.global.L1`) before the wait, after a bar.sync that follows the
//                  publish; the stage's loads then as in 1
//  17 l1pf-race    16 without that bar.sync
//  18 l2pf         16 with `prefetch.global.L2`
// Prints each mode's median ms a launch and its overhead a hop against mode 0 (modes 3-5
// against mode 3), then the stamped modes' split. Results and what they say: docs/PERF.md,
// session 31 (the signal ~0.8 µs, the refill ~0.5, the last CTA ~0.25; weights issued after
// the publish take back the refill; nothing tried shortens the signal).
#include "common.cuh"

constexpr int THREADS = 512, CTAS = 128, STAGES = 3, HOT = 1024, MODES = 19;
constexpr int POLLERS = 4, POLL_GAP = 64, CHUNKS = 4, FIRST = 16 * 1024, TINY = 1024;
constexpr int STEPS = LAYERS * STAGES;
__device__ __constant__ int W_BYTES[STAGES] = {64 * 1024, 32 * 1024, 144 * 1024};
__device__ __constant__ int ADDS[STAGES] = {32, 256, 1024};
constexpr int LAYER_BYTES = (64 + 32 + 144) * 1024 * CTAS;

__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void publish(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float fold(uint4 r) {
  return __uint_as_float(r.x & 0x3f800000u) + __uint_as_float(r.w & 0x3f800000u);
}
// Sum `n16` 16-byte words from p (4 in flight a thread).
__device__ __forceinline__ float sum_global(const uint4* p, int n16) {
  float a = 0.f;
  for (int i = threadIdx.x; i < n16; i += 4 * THREADS) {
    uint4 r[4];
#pragma unroll
    for (int v = 0; v < 4; ++v) r[v] = i + v * THREADS < n16 ? p[i + v * THREADS] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int v = 0; v < 4; ++v) a += fold(r[v]);
  }
  return a;
}

// Bytes of a stage's weights bulk-copied before its wait (modes 11-13).
__host__ __device__ constexpr int copied(int mode, int bytes) {
  return mode == 11 ? 16 * 1024 : mode == 12 ? 32 * 1024 : mode == 13 ? bytes : 0;
}
// Thread-issued bulk copies of `bytes` from src into shared dst, completing on bar.
__device__ __forceinline__ void copy_in(const uint4* src, int bytes, unsigned long long* bar, unsigned char* dst) {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after the generic reads of dst
  mbar_expect(bar, bytes);
  for (int o = 0; o < bytes; o += 32 * 1024)
    bulk_copy(dst + o, (const char*)src + o, bytes - o < 32 * 1024 ? bytes - o : 32 * 1024, bar);
}

struct Args {
  const uint4* w;
  float* hot;
  unsigned* sync;    // [0]: the counter; [32]: a word already at 1 (mode 9); [64 + 32 * step]: claims
  float* sink;
  unsigned long long* stamps;  // [STEPS][CTAS][2]: publish, wake (stamped modes)
};

extern __shared__ __align__(128) unsigned char slab[];  // modes 8, 11-13: the copied weights
__shared__ __align__(8) unsigned long long bar[2];
__shared__ float part[THREADS / 32];
__shared__ volatile unsigned seen;   // mode 6: the step a poller saw
__shared__ int ticket[2];            // mode 7: the claimed chunks

template <int MODE>
__global__ void __launch_bounds__(THREADS, 1) hops(Args a) {
  constexpr bool TINY_W = MODE >= 3 && MODE <= 5, STAMP = MODE == 2 || MODE == 5;
  constexpr bool WAITS = MODE != 0 && MODE != 3, PUB_COPY = MODE >= 11 && MODE <= 13;
  const int tid = threadIdx.x;
  if (tid == 0) {
    mbar_init(&bar[0], 1);
    mbar_init(&bar[1], 1);
    seen = 0;
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  float acc = 0.f;
  unsigned phase[2] = {0, 0};
  for (int step = 0; step < STEPS; ++step) {
    const int layer = step / STAGES, s = step % STAGES;
    size_t off = (size_t)layer * LAYER_BYTES;
    for (int k = 0; k < s; ++k) off += (size_t)W_BYTES[k] * CTAS;
    const int bytes = TINY_W ? TINY : W_BYTES[s];
    const char* stage_w = (const char*)a.w + off;                       // every CTA's slice
    const uint4* mine = (const uint4*)(stage_w + (size_t)blockIdx.x * W_BYTES[s]);
    // Before the wait: what needs no other CTA.
    if (MODE == 8 && tid == 0) copy_in(mine, FIRST, &bar[step & 1], slab + (step & 1) * FIRST);
    if (PUB_COPY && step == 0 && tid == 32) copy_in(mine, copied(MODE, bytes), &bar[0], slab);
    if (MODE >= 16 && MODE <= 18) {
      if (MODE != 17) __syncthreads();  // thread 32's publish issued first
#pragma unroll
      for (int v = 0; v < 4; ++v) {
        const uint4* q = mine + tid + v * THREADS;
        if (MODE == 18)
          asm volatile("prefetch.global.L2 [%0];" ::"l"(q));
        else
          asm volatile("prefetch.global.L1 [%0];" ::"l"(q));
      }
    }
    uint4 first[4];
    if (MODE == 10) {
#pragma unroll
      for (int v = 0; v < 4; ++v) first[v] = mine[tid + v * THREADS];
    }
    // The wait: every CTA has published `step` times.
    if (WAITS && step > 0) {
      const unsigned target = step * CTAS;
      if (MODE == 6) {
        if (tid % 32 == 0 && tid / 32 < POLLERS) {
          __nanosleep(POLL_GAP * (tid / 32));
          while (seen < (unsigned)step) {
            if (ld_acquire(a.sync) >= target) {
              seen = step;
              break;
            }
          }
        }
      } else if (tid == 0) {
        if (MODE == 9)
          while (ld_acquire(a.sync + 32) < 1u) {
          }
        if (MODE == 14) {
          while (ld_relaxed(a.sync) < target) {
          }
          asm volatile("fence.acq_rel.gpu;" ::: "memory");
        } else {
          while (ld_acquire(a.sync) < target) {
          }
        }
        if (STAMP) a.stamps[((size_t)step * CTAS + blockIdx.x) * 2 + 1] = now();
      }
      __syncthreads();
    }
    // The stage: the hot vector (the activations), the weights, a block sum.
    float x = __ldcg(a.hot + (tid % HOT));
    if (MODE == 7) {
      // Chunks of bytes / CHUNKS from the whole stage's weights, claimed in turn.
      unsigned* claims = a.sync + 64 + 32 * step;
      const int cbytes = bytes / CHUNKS, total = CHUNKS * CTAS;
      if (tid == 0) ticket[0] = atomicAdd(claims, 1u);
      __syncthreads();
      for (int k = 0;; ++k) {
        const int c = ticket[k & 1];
        if (c >= total) break;
        int next = 0;
        if (tid == 0) next = atomicAdd(claims, 1u);  // in flight while this chunk streams
        x += sum_global((const uint4*)(stage_w + (size_t)c * cbytes), cbytes / 16);
        if (tid == 0) ticket[(k + 1) & 1] = next;
        __syncthreads();
      }
    } else if (MODE == 8 || PUB_COPY) {
      const int b = MODE == 8 ? step & 1 : 0, n = copied(MODE, bytes);
      mbar_wait(&bar[b], phase[b]);
      phase[b] ^= 1;
      const uint4* q = (const uint4*)(slab + (MODE == 8 ? b * FIRST : 0));
      for (int i = tid; i < n / 16; i += THREADS) x += fold(q[i]);
      x += sum_global(mine + n / 16, (bytes - n) / 16);
    } else if (MODE == 10) {
#pragma unroll
      for (int v = 0; v < 4; ++v) x += fold(first[v]);
      x += sum_global(mine + 4 * THREADS, bytes / 16 - 4 * THREADS);
    } else {
      x += sum_global(mine, bytes / 16);
    }
    x = warp_sum(x);
    if (tid % 32 == 0) part[tid / 32] = x;
    __syncthreads();
    float tot = 0.f;
#pragma unroll
    for (int k = 0; k < THREADS / 32; ++k) tot += part[k];
    acc += tot;
    // Its outputs: atomics into the hot vector (the residual adds); warp 0 (the poller)
    // writes nothing.
    if (tid >= 32 && tid - 32 < ADDS[s]) atomicAdd(a.hot + (blockIdx.x * 7 + tid) % HOT, tot * 1e-9f);
    __syncthreads();  // every thread done with this stage (and mode 8's shared weights)
    if (tid == 32 && WAITS) {
      if (STAMP) a.stamps[((size_t)step * CTAS + blockIdx.x) * 2] = now();
      if (MODE == 15)
        asm volatile("fence.acq_rel.gpu;\n red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.sync) : "memory");
      else
        publish(a.sync, 1);
      // The next stage's weights, behind the publish in this thread's order.
      if (PUB_COPY && step + 1 < STEPS) {
        const int ns = (step + 1) % STAGES, nl = (step + 1) / STAGES;
        size_t noff = (size_t)nl * LAYER_BYTES;
        for (int k = 0; k < ns; ++k) noff += (size_t)W_BYTES[k] * CTAS;
        copy_in((const uint4*)((const char*)a.w + noff + (size_t)blockIdx.x * W_BYTES[ns]),
                copied(MODE, W_BYTES[ns]), &bar[0], slab);
      }
    }
  }
  if (tid == 0) a.sink[blockIdx.x] = acc;
}

// The smallest step %globaltimer takes, in ns (a stamp is no finer).
__global__ void timer_step(unsigned long long* out) {
  unsigned long long best = ~0ull, t = now();
  for (int i = 0; i < 20000; ++i) {
    const unsigned long long u = now();
    if (u != t && u - t < best) best = u - t;
    t = u;
  }
  *out = best;
}

typedef void (*Kernel)(Args);
static const Kernel KERNELS[MODES] = {hops<0>, hops<1>, hops<2>,  hops<3>,  hops<4>,  hops<5>,  hops<6>,
                                      hops<7>, hops<8>, hops<9>, hops<10>, hops<11>, hops<12>, hops<13>,
                                      hops<14>, hops<15>, hops<16>, hops<17>, hops<18>};
static const char* NAMES[MODES] = {"nowait",     "global",    "stamped", "tiny-nowait", "tiny",
                                   "tiny-stamped", "mpoll",   "dyn",     "first-smem",  "two-waits",
                                   "first-reg",  "pub-16k",   "pub-32k", "pub-stage",
                                   "relaxed-poll", "fence-red", "l1pf", "l1pf-race", "l2pf"};
constexpr int SMEM[MODES] = {0, 0, 0, 0, 0, 0, 0, 0, 2 * FIRST, 0, 0, 16 * 1024, 32 * 1024, 144 * 1024, 0, 0, 0, 0, 0};
constexpr size_t SYNC_WORDS = 64 + 32 * STEPS;

static float run(int mode, Args a) {
  CHECK(cudaMemset(a.sync, 0, SYNC_WORDS * 4));
  CHECK(cudaMemset(a.sync + 32, 1, 1));  // mode 9's satisfied word: 1
  return launch_ms([&] { KERNELS[mode]<<<CTAS, THREADS, SMEM[mode]>>>(a); });
}

// The split of each hop from one stamped launch: per stage kind, medians over the layers.
static void split(const char* name, const std::vector<unsigned long long>& st) {
  printf("%s, µs (median over layers; a hop from stage s-1's publishes to stage s's wakes):\n", name);
  printf("  %-6s %12s %12s %12s %12s %12s\n", "stage", "pub spread", "first wake", "median wake", "last wake",
         "compute");
  for (int s = 0; s < STAGES; ++s) {
    std::vector<double> spread, first, mid, last, compute;
    for (int step = 1; step < STEPS; ++step) {
      if (step % STAGES != s) continue;
      std::vector<double> pub, wake, pub_now;
      for (int c = 0; c < CTAS; ++c) {
        pub.push_back((double)st[((size_t)(step - 1) * CTAS + c) * 2]);
        wake.push_back((double)st[((size_t)step * CTAS + c) * 2 + 1]);
        pub_now.push_back((double)st[((size_t)step * CTAS + c) * 2]);
      }
      const double last_pub = *std::max_element(pub.begin(), pub.end());
      spread.push_back((last_pub - median(pub)) / 1e3);
      first.push_back((*std::min_element(wake.begin(), wake.end()) - last_pub) / 1e3);
      mid.push_back((median(wake) - last_pub) / 1e3);
      last.push_back((*std::max_element(wake.begin(), wake.end()) - last_pub) / 1e3);
      std::vector<double> d;
      for (int c = 0; c < CTAS; ++c) d.push_back(pub_now[c] - wake[c]);
      compute.push_back(median(d) / 1e3);
    }
    const char* kind[STAGES] = {"qkv", "o_proj", "mlp"};
    printf("  %-6s %12.3f %12.3f %12.3f %12.3f %12.3f\n", kind[s], median(spread), median(first), median(mid), median(last),
           median(compute));
  }
}

int main(int argc, char** argv) {
  const int reps = argc > 1 ? atoi(argv[1]) : 20;
  const size_t bytes = (size_t)LAYER_BYTES * LAYERS;
  Args a;
  uint4* w;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMemset(w, 0x3c, bytes));
  a.w = w;
  CHECK(cudaMalloc(&a.hot, HOT * 4));
  CHECK(cudaMemset(a.hot, 0, HOT * 4));
  CHECK(cudaMalloc(&a.sync, SYNC_WORDS * 4));
  CHECK(cudaMalloc(&a.sink, CTAS * 4));
  CHECK(cudaMalloc(&a.stamps, (size_t)STEPS * CTAS * 2 * 8));
  for (int m = 0; m < MODES; ++m)
    CHECK(cudaFuncSetAttribute((const void*)KERNELS[m], cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM[m]));
  unsigned long long* tstep;
  CHECK(cudaMalloc(&tstep, 8));
  timer_step<<<1, 1>>>(tstep);
  unsigned long long ts = 0;
  CHECK(cudaMemcpy(&ts, tstep, 8, cudaMemcpyDeviceToHost));
  printf("hop_parts: %d CTAs x %d threads, %d layers x %d stages, %.1f MB of weights; %%globaltimer steps by %llu ns\n",
         CTAS, THREADS, LAYERS, STAGES, bytes / 1e6, ts);
  std::vector<float> t[MODES];
  for (int r = 0; r < reps + 2; ++r)  // interleaved; the first two rounds warm up
    for (int m = 0; m < MODES; ++m) {
      const float ms = run(m, a);
      if (r >= 2) t[m].push_back(ms);
    }
  const int hops_n = STEPS - 1;
  float medv[MODES];
  for (int m = 0; m < MODES; ++m) {
    std::sort(t[m].begin(), t[m].end());
    medv[m] = t[m][t[m].size() / 2];
  }
  for (int m = 0; m < MODES; ++m) {
    const float base = m >= 3 && m <= 5 ? medv[3] : medv[0];
    printf("%-12s %.4f ms a launch (min %.4f, max %.4f), %.1f GB/s; %.3f us a hop over %s\n", NAMES[m], medv[m],
           t[m].front(), t[m].back(), (m >= 3 && m <= 5 ? 0 : bytes / (medv[m] * 1e6)),
           (medv[m] - base) * 1e3 / hops_n, m >= 3 && m <= 5 ? "tiny-nowait" : "nowait");
  }
  std::vector<unsigned long long> st((size_t)STEPS * CTAS * 2);
  for (int m : {2, 5}) {
    run(m, a);  // one more launch of its own, then its stamps
    CHECK(cudaMemcpy(st.data(), a.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    split(NAMES[m], st);
  }
  return 0;
}
