// What a decode step with the 0.6B step's hops can reach, whatever its arithmetic (issue 10,
// session 33). Chains that load the 0.6B weights (1192 MB: 28 layers of QKV 8 MiB, o_proj
// 4 MiB, gate/up + down 18 MiB, then the 311 MB lm_head), each CTA summing its share of a
// stage, reading the residual from L2 and reducing its squares (the norm's round trip and
// barriers), adding into the residual with atomics and publishing (bar.sync, red.release), the
// next stage waiting for its producers (thread 0 polls with acquire). No other arithmetic, so
// what they cost is the floor of any step with the same hops. Weights are random bf16 (their
// values do not matter); nothing is checked but the counters.
//   - `compute`: the chain, 85 stages, every stage waiting for every CTA; loads issued after or
//     before the wait (`ahead`), 8 or 16 a thread, the generated step's wait prefetch.
//   - `streamer`: K SMs that only put the next stages' weights into L2, paced by the chain's
//     counter (stage k once stage k - lead is complete), never publishing (session 32 found a
//     release waits behind its SM's weights in flight), and `prefetch_all`, their issue rate.
//   - `compute_pipe`: rounds double-buffered; the next stage's first round in flight across
//     the hop (`cross`); no residual atomics; the layer as 3, 2 or 1 stages (the same bytes,
//     fewer hops); the middle hop a cluster barrier (`chain_cl`).
//   - `step_chain`: the generated step's own sync pattern (per-head counters for the attention,
//     the residual's two copies, red.v4 for the MLP's adds) with per-stage stamps beside
//     `tessera tune --profile`'s: the bound of the step's bodies.
// On an H200 (docs/PERF.md, session 33): step_chain 1.63x the floor (the step 2.15x); two hops
// a layer 1.41-1.57x; streamers, weights in flight across a hop and the cluster barrier lose.
//
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o hop_bound scripts/probe/hop_bound.cu && ./hop_bound
#include "common.cuh"

constexpr int THREADS = 512;
constexpr int NST_MAX = 3 * LAYERS + 1;  // 84 layer stages and the lm_head (fewer: `hops per layer` below)
constexpr size_t QKV_B = (size_t)QKV_ROWS * HIDDEN * 2, O_B = (size_t)HIDDEN * QDIM * 2,
                 MLP_B = (size_t)3 * INTER * HIDDEN * 2, HEAD_B = (size_t)VOCAB * HIDDEN * 2;

struct Stage {
  size_t off, bytes;
};
__constant__ Stage c_st[NST_MAX];

struct Cfg {
  const uint4* w;
  float* xbuf;        // [2][HIDDEN]: the residual stand-in, by stage parity
  unsigned* cnt;      // finished (CTA, stage) pairs, never reset: `base` is this launch's start
  unsigned base;
  float* sink;
  int C;              // computing CTAs; CTAs C.. stream
  int waits;          // 0: no dependency waits (the bodies' bound; wrong on purpose)
  int lead;           // a streamer prefetches stage k once stage k - lead is complete
  int bulk;           // streamers: 1 = cp.async.bulk.prefetch.L2 of 32 KiB chunks, 0 = prefetch.global.L2 per line
  size_t cap;         // the most bytes of a stage the streamers prefetch (the lm_head's 311 MB exceed L2)
  size_t wait_pf;     // computing CTAs: bytes of each stage put into L2 while they wait (the generated step's 4 MiB)
  int round;          // computing CTAs: 16-byte loads in flight a thread (8 or 16)
  int ahead;          // computing CTAs: a stage's first round issued before its wait
  int pipe;           // computing CTAs: compute_pipe (rounds double-buffered)
  int cross;          // with pipe: the next stage's first round issued before this stage's adds and publish (2: not by warp 0)
  int adds;           // with pipe: the residual's atomics (0: left out, wrong on purpose)
  int nst;            // stages: LAYERS x (3, 2 or 1) and the lm_head
  int cl_mid;         // with pipe, 3 stages a layer, launched in clusters: the middle hop is the cluster's barrier
};

__device__ __forceinline__ void pf_line(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }
__device__ __forceinline__ void pf_bulk(const void* p, unsigned bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}
// A counter's wait (wrap-safe): acquire, as a consumer of the data must; relaxed, for the
// streamers, which only pace themselves by it.
__device__ __forceinline__ void spin_acquire(const unsigned* p, unsigned target) {
  while ((int)(ld_acquire(p) - target) < 0) {
  }
}
__device__ __forceinline__ void spin_relaxed(const unsigned* p, unsigned target) {
  while ((int)(ld_relaxed(p) - target) < 0) {
  }
}

// The 128-byte lines of [p, p + n) put into L2, split over `parts` CTAs of THREADS threads.
__device__ void prefetch_lines(const char* p, size_t n, int part, int parts) {
  const size_t lines = (n + 127) / 128;
  for (size_t i = (size_t)part * THREADS + threadIdx.x; i < lines; i += (size_t)parts * THREADS) pf_line(p + i * 128);
}

__device__ void streamer(const Cfg& c, int s, int K) {
  const int NST = c.nst;
  for (int k = 0; k < NST; ++k) {
    if (k - c.lead >= 0) {
      if (threadIdx.x == 0) spin_relaxed(c.cnt, c.base + (unsigned)c.C * (unsigned)(k - c.lead + 1));
      __syncthreads();
    }
    const char* p = (const char*)c.w + c_st[k].off;
    const size_t n = c_st[k].bytes < c.cap ? c_st[k].bytes : c.cap;
    if (c.bulk) {
      constexpr unsigned CH = 32768;
      const size_t chunks = (n + CH - 1) / CH;
      if (threadIdx.x < 32)
        for (size_t j = (size_t)s * 32 + threadIdx.x; j < chunks; j += (size_t)K * 32)
          pf_bulk(p + j * CH, (unsigned)((j + 1) * CH <= n ? CH : n - j * CH));
    } else {
      prefetch_lines(p, n, s, K);
    }
  }
}

__device__ __forceinline__ float sq(float v) { return v * v; }

__device__ float block_sum512(float v, float* red) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = threadIdx.x < THREADS / 32 ? red[threadIdx.x] : 0.f;
  if (threadIdx.x < 32) t = warp_sum(t);
  if (threadIdx.x == 0) red[32] = t;
  __syncthreads();
  const float r = red[32];
  __syncthreads();
  return r;
}

// One round of a thread's weight loads: R 16-byte words, THREADS apart.
template <int R>
__device__ __forceinline__ void load_round(uint4* v, const uint4* p, size_t i, size_t hi) {
#pragma unroll
  for (int u = 0; u < R; ++u) v[u] = i + u * THREADS < hi ? p[i + u * THREADS] : make_uint4(0, 0, 0, 0);
}

// The CTA's share [lo, hi) of stage k's 16-byte words, C CTAs sharing it.
__device__ __forceinline__ void share_of(int k, int C, int cta, size_t& lo, size_t& hi) {
  const size_t n16 = c_st[k].bytes / 16, share = (n16 + C - 1) / C;
  lo = (size_t)cta * share;
  hi = lo + share < n16 ? lo + share : n16;
}

// A dependency wait as the generated step makes it: thread 0 polls, a barrier lets the rest go.
__device__ __forceinline__ void cta_wait(const unsigned* p, unsigned target) {
  if (threadIdx.x == 0) spin_acquire(p, target);
  __syncthreads();
}

// 1/rms of the 1024-float vector whose elements t and t + 512 thread t holds (the norm's
// reduction and barriers).
__device__ __forceinline__ float rms_inv(float x0, float x1, float* red) {
  return rsqrtf(block_sum512(sq(x0) + sq(x1), red) * (1.f / HIDDEN) + EPS);
}

// Stage k's output: with `adds`, the CTA's 1024 floats added into the next residual; then the
// publish (barrier, release add).
__device__ __forceinline__ void add_and_publish(const Cfg& c, int k, float acc, bool adds) {
  float* xout = c.xbuf + ((k + 1) & 1) * HIDDEN;
  if (adds) {
    atomicAdd(xout + threadIdx.x, acc * 1e-30f);
    atomicAdd(xout + threadIdx.x + 512, acc * 1e-30f);
  }
  __syncthreads();
  if (threadIdx.x == 0) publish(c.cnt, 1u);
}

template <int R>
__device__ void compute(const Cfg& c, int cta, float* red) {
  float keep = 0.f;
  const int NST = c.nst;
  for (int k = 0; k < NST; ++k) {
    const uint4* p = c.w + c_st[k].off / 16;
    size_t lo, hi;
    share_of(k, c.C, cta, lo, hi);
    uint4 v[R];
    // `ahead`: the stage's first round of weights in flight while the CTA waits.
    if (c.ahead) load_round<R>(v, p, lo + threadIdx.x, hi);
    if (k > 0 && c.waits) {
      if (c.wait_pf) {
        const size_t pf = c_st[k].bytes < c.wait_pf ? c_st[k].bytes : c.wait_pf;
        prefetch_lines((const char*)p, pf, cta, c.C);
      }
      cta_wait(c.cnt, c.base + (unsigned)c.C * (unsigned)k);
    }
    // The weights first (as the generated bodies do), then the residual and its norm,
    // which every product needs.
    if (!c.ahead) load_round<R>(v, p, lo + threadIdx.x, hi);
    const float* xin = c.xbuf + (k & 1) * HIDDEN;  // from L2 (__ldcg): the publishers wrote it there
    const float x0 = __ldcg(xin + threadIdx.x), x1 = __ldcg(xin + threadIdx.x + 512);
    const float xs = (x0 + x1 + 1.f) * rms_inv(x0, x1, red);
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < R; ++u) acc += fold(v[u]) * xs;
    for (size_t i = lo + threadIdx.x + R * THREADS; i < hi; i += R * THREADS) {
      load_round<R>(v, p, i, hi);
#pragma unroll
      for (int u = 0; u < R; ++u) acc += fold(v[u]) * xs;
    }
    keep += acc;
    if (k == NST - 1) break;
    add_and_publish(c, k, acc, true);
  }
  if (keep == 1.2345f) c.sink[cta] = keep;
}

// The same chain with a thread's rounds double-buffered: the next round is issued before
// this one is summed, and with `cross` the next stage's first round before this stage's
// last is summed, so it is in flight through the stage's adds, publish and the next wait.
template <int R>
__device__ void compute_pipe(const Cfg& c, int cta, float* red) {
  float keep = 0.f;
  uint4 v[R], vn[R];
  size_t lo, hi;
  share_of(0, c.C, cta, lo, hi);
  load_round<R>(v, c.w + c_st[0].off / 16, lo + threadIdx.x, hi);
  const int NST = c.nst;
  for (int k = 0; k < NST; ++k) {
    const uint4* p = c.w + c_st[k].off / 16;
    share_of(k, c.C, cta, lo, hi);
    // cross 2: warp 0 (thread 0 publishes) takes no part in the early round: its release
    // does not wait for loads of its own.
    const bool early = c.cross == 1 || (c.cross == 2 && threadIdx.x >= 32);
    if (k > 0 && !early) load_round<R>(v, p, lo + threadIdx.x, hi);
    if (k > 0 && c.waits && c.cl_mid && k % 3 == 1) {
      // The layer's middle hop (QKV -> attention + o_proj) inside a cluster: its hardware
      // barrier, as if the cluster's CTAs computed one KV group's q, k and v and exchanged
      // them through distributed shared memory (the exchange itself is not modelled).
      cluster_sync();
    } else if (k > 0 && c.waits) {
      cta_wait(c.cnt, c.base + (unsigned)c.C * (unsigned)k);
    }
    const float* xin = c.xbuf + (k & 1) * HIDDEN;
    const float x0 = __ldcg(xin + threadIdx.x), x1 = __ldcg(xin + threadIdx.x + 512);
    const float xs = (x0 + x1 + 1.f) * rms_inv(x0, x1, red);
    float acc = 0.f;
    for (size_t i = lo + threadIdx.x;; i += R * THREADS) {
      const bool more = i + R * THREADS < hi;
      if (more) {
        load_round<R>(vn, p, i + R * THREADS, hi);
      } else if (early && k + 1 < NST) {
        size_t lo1, hi1;
        share_of(k + 1, c.C, cta, lo1, hi1);
        load_round<R>(vn, c.w + c_st[k + 1].off / 16, lo1 + threadIdx.x, hi1);
      }
#pragma unroll
      for (int u = 0; u < R; ++u) acc += fold(v[u]) * xs;
#pragma unroll
      for (int u = 0; u < R; ++u) v[u] = vn[u];
      if (!more) break;
    }
    keep += acc;
    if (k == NST - 1) break;
    add_and_publish(c, k, acc, c.adds);
  }
  if (keep == 1.2345f) c.sink[cta] = keep;
}

__global__ void __launch_bounds__(THREADS, 1) chain(Cfg c) {
  __shared__ float red[33];
  const int K = gridDim.x - c.C;
  if ((int)blockIdx.x < c.C) {
    if (c.pipe)
      compute_pipe<8>(c, blockIdx.x, red);
    else if (c.round == 16)
      compute<16>(c, blockIdx.x, red);
    else
      compute<8>(c, blockIdx.x, red);
  } else {
    streamer(c, blockIdx.x - c.C, K);
  }
}

// The chain in clusters of CL (compute_pipe only, no streamers).
template <int CL>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS, 1) chain_cl(Cfg c) {
  __shared__ float red[33];
  compute_pipe<8>(c, blockIdx.x, red);
  cluster_sync();  // no CTA leaves while another of its cluster may still arrive
}

// ---- the generated 0.6B step's own sync pattern, with sums for arithmetic ----
// 128 CTAs (the step's 128 programs a stage) and its three stages a layer:
//   QKV (CTA c: rows 32c.., 64 KiB) reads the residual's two copies, stores 32 outputs and
//     the norm's copy, bumps its head's counter (4 CTAs a head: q heads 0-15, k 16-23, v 24-31);
//   attention + o_proj (CTA c = head h + 16 j: its 32 KiB block) waits for its q head's and its
//     KV group's k and v counters only, reads their 3 x 128 outputs, adds 128 floats into the
//     MLP's input and into copy h % 2 of the residual, bumps the o counter;
//   MLP (CTA c: 144 KiB) waits for all 128 o programs, reads its input, adds 1024 floats
//     into copy c % 2 of the residual with red.v4 (256 a CTA), bumps the MLP counter;
//   the next QKV waits for all 128 MLP programs; the lm_head (its share of 311 MB) too.
// What the step adds to this is its arithmetic: the bound its bodies could reach.
struct Step {
  const uint4* w;
  float *x2, *xm, *out;  // the residual [2][HIDDEN], the MLP's input [HIDDEN], QKV's outputs [QKV_ROWS]
  unsigned *cq, *co, *cm;  // counters: 32 head groups (a line apart), o, MLP
  unsigned bq, bo, bm;     // this launch's starting values
  float* sink;
  int waits;
  unsigned long long* prof;  // null, or [SCTAS][3 * LAYERS + 1][4] stamps: entered, past its wait, body done, published
};
constexpr int SCTAS = 128;

// Bytes [off, off + n) of the weights summed by the CTA, rounds of 8 loads double-buffered.
__device__ float sum_share(const uint4* w, size_t off, size_t n) {
  const uint4* p = w + off / 16;
  const size_t hi = n / 16;
  uint4 v[8], vn[8];
  load_round<8>(v, p, threadIdx.x, hi);
  float acc = 0.f;
  for (size_t i = threadIdx.x;; i += 8 * THREADS) {
    const bool more = i + 8 * THREADS < hi;
    if (more) load_round<8>(vn, p, i + 8 * THREADS, hi);
#pragma unroll
    for (int u = 0; u < 8; ++u) acc += fold(v[u]);
#pragma unroll
    for (int u = 0; u < 8; ++u) v[u] = vn[u];
    if (!more) break;
  }
  return acc;
}

__global__ void __launch_bounds__(THREADS, 1) step_chain(Step s) {
  __shared__ float red[33];
  const int c = blockIdx.x, t = threadIdx.x;
  float keep = 0.f;
  size_t off = 0;
  // Thread 0's stamps of stage run k (profile launches only).
  auto stamp = [&](int k, int i) {
    if (s.prof && t == 0) s.prof[((size_t)c * (3 * LAYERS + 1) + k) * 4 + i] = now();
  };
  // The body's end: every thread done (the generated step's programs end on a barrier).
  auto body_done = [&](int k) {
    if (s.prof) {
      __syncthreads();
      stamp(k, 2);
    }
  };
  for (int l = 0; l < LAYERS; ++l) {
    // QKV
    stamp(3 * l, 0);
    if (s.waits && l > 0) cta_wait(s.cm, s.bm + SCTAS * l);
    stamp(3 * l, 1);
    float acc = sum_share(s.w, off + (size_t)c * (QKV_B / SCTAS), QKV_B / SCTAS);
    {
      const float x0 = __ldcg(s.x2 + t) + __ldcg(s.x2 + HIDDEN + t), x1 = __ldcg(s.x2 + t + 512) + __ldcg(s.x2 + HIDDEN + t + 512);
      acc *= rms_inv(x0, x1, red);
      if (c < 2) s.xm[c * 512 + t] = x0 + x1;  // the norm's copy for o_proj's adds (QKV_COPY_ROWS)
    }
    if (t < 32) s.out[c * 32 + t] = acc;
    body_done(3 * l);
    __syncthreads();
    if (t == 0) publish(s.cq + (c / 4) * 32, 1u);
    stamp(3 * l, 3);
    off += QKV_B;
    // attention + o_proj
    const int h = c % 16, j = c / 16;
    stamp(3 * l + 1, 0);
    if (s.waits) {
      if (t < 3) spin_acquire(s.cq + (t == 0 ? h : t == 1 ? 16 + h / 2 : 24 + h / 2) * 32, s.bq + 4 * (l + 1));
      __syncthreads();
    }
    stamp(3 * l + 1, 1);
    acc = sum_share(s.w, off + (size_t)c * (O_B / SCTAS), O_B / SCTAS);
    {
      const int g = t < 128 ? h : t < 256 ? 16 + h / 2 : 24 + h / 2;  // q, k, v of the head
      const float qkv = t < 384 ? __ldcg(s.out + g * 128 + (t & 127)) : 0.f;
      acc *= block_sum512(qkv, red) * 1e-30f + 1.f;  // the scores' reduction
    }
    if (t < 128) {
      atomicAdd(s.xm + j * 128 + t, acc * 1e-30f);
      atomicAdd(s.x2 + (h % 2) * HIDDEN + j * 128 + t, acc * 1e-30f);
    }
    body_done(3 * l + 1);
    __syncthreads();
    if (t == 0) publish(s.co, 1u);
    stamp(3 * l + 1, 3);
    off += O_B;
    // MLP
    stamp(3 * l + 2, 0);
    if (s.waits) cta_wait(s.co, s.bo + SCTAS * (l + 1));
    stamp(3 * l + 2, 1);
    acc = sum_share(s.w, off + (size_t)c * (MLP_B / SCTAS), MLP_B / SCTAS);
    {
      const float x0 = __ldcg(s.xm + t), x1 = __ldcg(s.xm + t + 512);
      acc *= rms_inv(x0, x1, red);
    }
    if (t < 256) {
      const float a = acc * 1e-30f;
      red_v4(s.x2 + (c % 2) * HIDDEN + 4 * t, make_float4(a, a, a, a));
    }
    body_done(3 * l + 2);
    __syncthreads();
    if (t == 0) publish(s.cm, 1u);
    stamp(3 * l + 2, 3);
    off += MLP_B;
    keep += acc;
  }
  // lm_head
  stamp(3 * LAYERS, 0);
  if (s.waits) cta_wait(s.cm, s.bm + SCTAS * LAYERS);
  stamp(3 * LAYERS, 1);
  keep += sum_share(s.w, off + (size_t)c * (HEAD_B / SCTAS / 16 * 16), HEAD_B / SCTAS / 16 * 16);
  body_done(3 * LAYERS);
  stamp(3 * LAYERS, 3);
  if (keep == 1.2345f) s.sink[c] = keep;
}

// K CTAs prefetch the whole 1192 MB into L2 and nothing reads it: the streamers' issue rate.
__global__ void __launch_bounds__(THREADS, 1) prefetch_all(const char* p, size_t n, int bulk) {
  if (bulk) {
    constexpr unsigned CH = 32768;
    const size_t chunks = n / CH;
    if (threadIdx.x < 32)
      for (size_t j = (size_t)blockIdx.x * 32 + threadIdx.x; j < chunks; j += (size_t)gridDim.x * 32) pf_bulk(p + j * CH, CH);
  } else {
    prefetch_lines(p, n, blockIdx.x, gridDim.x);
  }
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IONBF, 0);
  int reps = 20;
  for (int i = 1; i < argc; ++i)
    if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;

  // The layer's weights as 3 stages (the generated step's QKV, attention + o_proj, MLP), 2
  // or 1: the same bytes in the same order, fewer hops.
  auto layout = [](int per_layer) {
    std::vector<Stage> st;
    size_t off = 0;
    const std::vector<size_t> parts = per_layer == 3   ? std::vector<size_t>{QKV_B, O_B, MLP_B}
                                      : per_layer == 2 ? std::vector<size_t>{QKV_B + O_B, MLP_B}
                                                       : std::vector<size_t>{QKV_B + O_B + MLP_B};
    for (int l = 0; l < LAYERS; ++l)
      for (size_t b : parts) st.push_back({off, b}), off += b;
    st.push_back({off, HEAD_B});
    CHECK(cudaMemcpyToSymbol(c_st, st.data(), sizeof(Stage) * st.size()));
    return (int)st.size();
  };
  int nst = layout(3);
  const size_t bytes = (size_t)LAYERS * (QKV_B + O_B + MLP_B) + HEAD_B;
  bf16* w;
  float *xbuf, *sink;
  unsigned *cnt, *usink;
  CHECK(cudaMalloc(&w, bytes));
  CHECK(cudaMalloc(&xbuf, 2 * HIDDEN * 4));
  CHECK(cudaMemset(xbuf, 0, 2 * HIDDEN * 4));
  CHECK(cudaMalloc(&sink, sms * 4));
  CHECK(cudaMalloc(&cnt, 4));
  CHECK(cudaMemset(cnt, 0, 4));
  CHECK(cudaMalloc(&usink, 4));
  fill_random<<<1024, 256>>>(w, bytes / 2, 1, 0.05f, 0.f);
  CHECK(cudaDeviceSynchronize());
  printf("%s, %d SMs, L2 %d MB, %.0f MB of weights (Qwen3-0.6B decode shapes), %d reps\n", prop.name, sms,
         prop.l2CacheSize >> 20, bytes / 1e6, reps);

  const float floor_ms = median_ms([&] { stream_read<<<sms * 4, 512>>>((const uint4*)w, bytes / 16, usink); }, reps);
  printf("floor: plain read of the weights %.3f ms = %.0f GB/s\n\n", floor_ms, bytes / floor_ms / 1e6);

  printf("| streamers only: K CTAs prefetch all of it into L2 (issue rate; nothing waits for the lines) | ms | GB/s |\n|---|---:|---:|\n");
  for (int bulk : {0, 1})
    for (int K : {4, 8, 16, 32, sms}) {
      const float ms = median_ms([&] { prefetch_all<<<K, THREADS>>>((const char*)w, bytes, bulk); }, reps);
      printf("| %s, K = %d | %.3f | %.0f |\n", bulk ? "bulk 32 KiB" : "per line", K, ms, bytes / ms / 1e6);
    }

  unsigned base = 0;
  struct V {
    int K, waits, lead, bulk;
    size_t cap, wait_pf;
    int round, ahead, pipe = 0, cross = 0, adds = 1;
  };
  const size_t MiB = 1 << 20, CAP = 32 * MiB;
  const std::vector<V> vs = {
      {0, 1, 0, 0, 0, 0, 8, 0},         {0, 1, 0, 0, 0, 4 * MiB, 8, 0},   {0, 1, 0, 0, 0, 4 * MiB, 16, 0},
      {0, 1, 0, 0, 0, 0, 8, 1},         {0, 1, 0, 0, 0, 4 * MiB, 8, 1},   {0, 1, 0, 0, 0, 0, 16, 1},
      {0, 1, 0, 0, 0, 4 * MiB, 16, 1},  {0, 0, 0, 0, 0, 0, 8, 0},         {0, 0, 0, 0, 0, 0, 16, 0},
      {0, 0, 0, 0, 0, 0, 8, 1},         {0, 0, 0, 0, 0, 0, 16, 1},        {4, 1, 0, 0, 0, 4 * MiB, 8, 0},
      {4, 0, 0, 0, 0, 0, 8, 0},         {4, 1, 2, 0, CAP, 0, 8, 0},       {4, 1, 2, 1, CAP, 0, 8, 0},
      {8, 1, 2, 0, CAP, 0, 8, 0},       {8, 1, 2, 1, CAP, 0, 8, 0},       {16, 1, 2, 0, CAP, 0, 8, 0},
      {16, 1, 2, 1, CAP, 0, 8, 0},      {16, 1, 3, 1, CAP, 0, 8, 0},      {16, 1, 2, 1, CAP, 4 * MiB, 8, 0},
      {16, 0, 2, 1, CAP, 0, 8, 0},
      {0, 1, 0, 0, 0, 0, 8, 0, 1, 0},   {0, 1, 0, 0, 0, 0, 8, 0, 1, 1},   {0, 0, 0, 0, 0, 0, 8, 0, 1, 0},
      {0, 0, 0, 0, 0, 0, 8, 0, 1, 1},   {0, 1, 0, 0, 0, 0, 8, 0, 1, 2},   {0, 0, 0, 0, 0, 0, 8, 0, 1, 2},
      {0, 0, 0, 0, 0, 0, 8, 0, 1, 0, 0}, {0, 0, 0, 0, 0, 0, 8, 0, 1, 1, 0}, {0, 1, 0, 0, 0, 0, 8, 0, 1, 0, 0},
  };
  printf("\n| chain: computing CTAs C, streamers K | waits | loads a thread | first round before the wait | lead | streamers prefetch | wait prefetch | ms | x floor |\n|---|---|---:|---|---:|---|---:|---:|---:|\n");
  for (const V& v : vs) {
    Cfg c{(const uint4*)w, xbuf, cnt, 0, sink, sms - v.K, v.waits, v.lead, v.bulk, v.cap, v.wait_pf, v.round, v.ahead, v.pipe, v.cross, v.adds, nst, 0};
    const bool streams = v.K > 0 && v.lead > 0;
    const float ms = median_ms(
        [&] {
          c.base = base;
          chain<<<sms - (streams ? 0 : v.K), THREADS>>>(c);  // K > 0 with no lead: the K SMs idle
          base += (unsigned)c.C * (nst - 1);
        },
        reps);
    printf("| C = %d, K = %d | %s | %d | %s | %d | %s | %zu MiB | %.3f | %.2fx |\n", c.C, streams ? v.K : 0,
           v.waits ? "yes" : "no (wrong)", v.round, v.pipe ? (v.cross == 2 ? (v.adds ? "pipelined, across stages but warp 0" : "?") : v.cross ? (v.adds ? "pipelined, across stages" : "pipelined, across stages, no adds (wrong)") : v.adds ? "pipelined in a stage" : "pipelined in a stage, no adds (wrong)") : v.ahead ? "yes" : "no", v.lead,
           !streams ? "-" : v.bulk ? "bulk 32 KiB" : "per line", v.wait_pf / MiB, ms, ms / floor_ms);
  }

  printf("\n| hops per layer (the same bytes; pipelined in a stage, C = %d) | waits, adds | waits, no adds (wrong) | no waits, adds (wrong) | no waits, no adds (wrong) |\n|---|---:|---:|---:|---:|\n", sms);
  for (int per : {3, 2, 1}) {
    nst = layout(per);
    printf("| %d (%d stages) |", per, nst);
    for (int waits : {1, 0})
      for (int adds : {1, 0}) {
        Cfg c{(const uint4*)w, xbuf, cnt, 0, sink, sms, waits, 0, 0, 0, 0, 8, 0, 1, 0, adds, nst, 0};
        const float ms = median_ms(
            [&] {
              c.base = base;
              chain<<<sms, THREADS>>>(c);
              base += (unsigned)c.C * (nst - 1);
            },
            reps);
        printf(" %.3f (%.2fx) |", ms, ms / floor_ms);
      }
    printf("\n");
  }

  // The middle hop of each layer as a cluster barrier, against the same CTAs with every hop
  // global. Clusters of CL CTAs of one SM each: as many as the GPU holds at once (on an H200
  // 15 of 8 and 7 of 16, not the 16 and 8 that 128 CTAs would need).
  nst = layout(3);
  CHECK(cudaFuncSetAttribute((const void*)chain_cl<16>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  printf("\n| 3 stages a layer, pipelined in a stage | waits, adds | waits, no adds (wrong) |\n|---|---:|---:|\n");
  for (int cl : {8, 16}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(cl * 8);
    cfg.blockDim = dim3(THREADS);
    int clusters = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&clusters, cl == 8 ? (const void*)chain_cl<8> : (const void*)chain_cl<16>, &cfg));
    const int ctas = clusters * cl;
    for (int mode : {0, 1}) {
      if (mode)
        printf("| %d CTAs, the middle hop a cluster barrier (%d clusters of %d) |", ctas, clusters, cl);
      else
        printf("| %d CTAs, every hop global |", ctas);
      for (int adds : {1, 0}) {
        Cfg c{(const uint4*)w, xbuf, cnt, 0, sink, ctas, 1, 0, 0, 0, 0, 8, 0, 1, 0, adds, nst, mode};
        const float ms = median_ms(
            [&] {
              c.base = base;
              if (mode == 0)
                chain<<<ctas, THREADS>>>(c);
              else if (cl == 8)
                chain_cl<8><<<ctas, THREADS>>>(c);
              else
                chain_cl<16><<<ctas, THREADS>>>(c);
              base += (unsigned)c.C * (nst - 1);
            },
            reps);
        printf(" %.3f (%.2fx) |", ms, ms / floor_ms);
      }
      printf("\n");
    }
  }

  {
    Step sp{};
    sp.w = (const uint4*)w;
    CHECK(cudaMalloc(&sp.x2, 2 * HIDDEN * 4));
    CHECK(cudaMalloc(&sp.xm, HIDDEN * 4));
    CHECK(cudaMalloc(&sp.out, QKV_ROWS * 4));
    CHECK(cudaMemset(sp.x2, 0, 2 * HIDDEN * 4));
    CHECK(cudaMemset(sp.xm, 0, HIDDEN * 4));
    unsigned* cs;
    CHECK(cudaMalloc(&cs, (32 * 32 + 64) * 4));
    CHECK(cudaMemset(cs, 0, (32 * 32 + 64) * 4));
    sp.cq = cs;
    sp.co = cs + 32 * 32;
    sp.cm = cs + 32 * 32 + 32;
    sp.sink = sink;
    printf("\n| the generated step's sync pattern, no arithmetic (%d CTAs) | ms | x floor |\n|---|---:|---:|\n", SCTAS);
    for (int waits : {1, 0}) {
      sp.waits = waits;
      const float ms = median_ms(
          [&] {
            step_chain<<<SCTAS, THREADS>>>(sp);
            sp.bq += 4 * LAYERS;
            sp.bo += SCTAS * LAYERS;
            sp.bm += SCTAS * LAYERS;
          },
          reps);
      printf("| %s | %.3f | %.2fx |\n", waits ? "waits" : "no waits (wrong)", ms, ms / floor_ms);
    }
    // One profiled launch of each (an extra barrier a stage): per stage, the mean over CTAs,
    // median over layers, of µs waiting, in the body and publishing, as `tessera tune --profile`
    // reports the generated step's.
    const int runs = 3 * LAYERS + 1;
    std::vector<unsigned long long> h((size_t)SCTAS * runs * 4);
    CHECK(cudaMalloc(&sp.prof, h.size() * 8));
    for (int waits : {1, 0}) {
      sp.waits = waits;
      step_chain<<<SCTAS, THREADS>>>(sp);
      CHECK(cudaDeviceSynchronize());
      sp.bq += 4 * LAYERS;
      sp.bo += SCTAS * LAYERS;
      sp.bm += SCTAS * LAYERS;
      CHECK(cudaMemcpy(h.data(), sp.prof, h.size() * 8, cudaMemcpyDeviceToHost));
      printf("\nprofile, %s: µs per CTA (mean over CTAs, median over layers)\n| stage | span | dependency wait | body | publish |\n|---|---:|---:|---:|---:|\n",
             waits ? "waits" : "no waits (wrong)");
      const char* names[4] = {"QKV", "attention + o_proj", "MLP", "lm_head"};
      for (int kind = 0; kind < 4; ++kind) {
        std::vector<double> col[4];
        for (int l = 0; l < (kind == 3 ? 1 : LAYERS); ++l) {
          const int k = kind == 3 ? 3 * LAYERS : 3 * l + kind;
          double m[4] = {0, 0, 0, 0};
          for (int cc = 0; cc < SCTAS; ++cc) {
            const unsigned long long* q = &h[((size_t)cc * runs + k) * 4];
            m[0] += (q[3] - q[0]) / 1e3;
            m[1] += (q[1] - q[0]) / 1e3;
            m[2] += (q[2] - q[1]) / 1e3;
            m[3] += (q[3] - q[2]) / 1e3;
          }
          for (int i = 0; i < 4; ++i) col[i].push_back(m[i] / SCTAS);
        }
        printf("| %s | %.2f | %.2f | %.2f | %.2f |\n", names[kind], median(col[0]), median(col[1]), median(col[2]),
               median(col[3]));
      }
    }
  }
  return 0;
}
