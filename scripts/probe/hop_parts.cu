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
//  19 ring64       a producer warp (one lane) streams the CTA's whole weight sequence, every
//                  stage and layer, through a ring of 4 x 16 KiB slots in shared memory (bulk
//                  copies, full/empty mbarriers) while the 512 consumer threads wait as in 1
//                  and sum from the ring: the stream never waits on a hop, only on a free slot
//  20 ring32       19 with 2 slots (at most 32 KiB in flight)
//  21 ring48       19 with 3 slots
//  22 ring-nowait  19 with 12 slots and no waits: the ring's own stream + compute ceiling
//  23 ring64-st    19 with 2's stamps
//  24 ring64-rlx   19 publishing with `red.relaxed.gpu` (no release: wrong in general; it
//                  says whether the release waits behind the stream in flight)
//  25 ring64-rlx-st 24 with 2's stamps
//  26 ring32-nowait 20 without the waits (does 32 KiB in flight keep the stream?)
//  27 ring32-st    20 with 2's stamps
//  28 ring32x8k    19 with 4 slots of 8 KiB
//  29 ring64-noadd 19 with no atomics before the publish (what does the release wait for?)
//  30 ring64-noadd-rlx 29 publishing relaxed
//  31 ldring64     19 with 4 producer warps filling the slots by `ld.global` into registers
//                  and `st.shared` (no bulk copies; 32 KiB in flight), publishing with release
//  32 ldring64-rlx 31 publishing relaxed
//  33 hub8         hubs (below): clusters of 8, rank 0 the hub, 7 streamers a cluster
//  34 hub8-nowait  33 without the waits and the hubs' work: its stream ceiling (112 streamers)
//  35 hub4         33 with clusters of 4
//  36 hub4-nowait  34 with clusters of 4
//  37 ring64-all   19, every CTA adding into all HOT words a stage (the residual's split-k)
//  38 ring64-ll    37 with the words carrying their count of adds (`ll`): readers poll the
//                  words they read, writers add relaxed; no counter, no fence
//  39 ll-nowait    38 without the polls
//  40 ring64-all-rlx 37 publishing relaxed (wrong in general: the bound)
//  41 ring64-clf   24 with `fence.acq_rel.cluster` before the relaxed red (what a cluster-scope
//                  release costs a streaming SM; wrong for a gpu-wide counter)
//  42 ring64-ctaf  24 with `fence.acq_rel.cta` (likewise)
//  43 hublite8     33's clusters, LITE: the release on the hub, the streamers' fence cluster-wide
//  44 ring64-gate0 19, the producer holding a stage's first chunk until the CTA has published
//                  the previous stage (a correct release with nothing in flight behind it)
//  45 ring64-gate1 44 letting one chunk of the next stage go first
//  46 ring64-gate2 44 letting two go first
//  47 ring128-gate1 45 with 8 slots
//  48 ring128-gate2 46 with 8 slots
// Prints each mode's median ms a launch and its overhead a hop against its own no-wait form
// (modes 3-5 against 3, the rings against 22, the hubs against 34 / 36, 37-40 against 39),
// then the stamped modes' split. Results and what they say: docs/PERF.md, session 31 (the
// signal ~0.8 µs, the refill ~0.5, the last CTA ~0.25; weights issued after the publish take
// back the refill) and session 32, H200 (a release on an SM with weights in flight waits
// behind them: ring64 1.08 µs a hop, relaxed 0.32; holding the stream for the publish,
// ring64-gate1, 0.51 against global's 1.29: the correct form nearest the bound).
#include "common.cuh"

constexpr int THREADS = 512, CTAS = 128, STAGES = 3, HOT = 1024, MODES = 49;
constexpr int POLLERS = 4, POLL_GAP = 64, CHUNKS = 4, FIRST = 16 * 1024, TINY = 1024;
constexpr int STEPS = LAYERS * STAGES;
__device__ __constant__ int W_BYTES[STAGES] = {64 * 1024, 32 * 1024, 144 * 1024};
__device__ __constant__ int ADDS[STAGES] = {32, 256, 1024};
constexpr int LAYER_BYTES = (64 + 32 + 144) * 1024 * CTAS;

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
  unsigned long long* ll;      // [HOT] `ll` words (modes 37-38), zeroed before each launch
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

// Modes 19-24: a producer lane streams every stage's weights through SLOTS x SLOT bytes of
// shared memory; it waits only for a free slot (a hop never stops it). The consumers (warps
// 0..15) wait and publish as mode 1 does, with a named barrier among themselves.
__device__ __forceinline__ size_t stage_offset(int step) {
  const int layer = step / STAGES, s = step % STAGES;
  size_t off = (size_t)layer * LAYER_BYTES;
  for (int k = 0; k < s; ++k) off += (size_t)W_BYTES[k] * CTAS;
  return off + (size_t)blockIdx.x * W_BYTES[s];
}
// `ll` words: a sum and the number of adds in one 64-bit word (fixed point with 2^-24 steps
// in the top 48 bits, the count in the low 16), so a reader knows from the word alone that
// every add is in: no release, no counter. Sums of fixed point are also order-independent.
__device__ __forceinline__ void ll_add(unsigned long long* p, float v) {
  const long long f = llrintf(v * 16777216.f);
  asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" ::"l"(p), "l"((unsigned long long)(f << 16) + 1ull) : "memory");
}
__device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ float ll_value(unsigned long long v) { return (float)((long long)v >> 16) * (1.f / 16777216.f); }
// The producer lane's walk: every stage's `bytes` from `src` (src_of(step, &src, &bytes)),
// in chunks of at most SLOT through the ring; it waits only for a free slot.
// gate(step, c) runs before the stage's chunk c is issued (modes 44-45 hold the stream there).
template <int SLOTS, int SLOT, class SrcOf, class Gate>
__device__ __forceinline__ void produce_ring(SrcOf src_of, Gate gate, unsigned long long* full,
                                             unsigned long long* empty) {
  int k = 0;  // chunks issued so far
  for (int step = 0; step < STEPS; ++step) {
    const char* src;
    int bytes;
    src_of(step, &src, &bytes);
    for (int o = 0; o < bytes; o += SLOT, ++k) {
      const int n = bytes - o < SLOT ? bytes - o : SLOT, slot = k % SLOTS, use = k / SLOTS;
      gate(step, o / SLOT);
      if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
      mbar_expect(&full[slot], n);
      bulk_copy(slab + (size_t)slot * SLOT, src + o, n, &full[slot]);
    }
  }
}
// The consumers' side: a stage's `bytes` summed from the ring, each slot freed by every
// consumer warp; k counts the chunks consumed so far.
template <int SLOTS, int SLOT>
__device__ __forceinline__ float consume_ring(int bytes, int& k, unsigned long long* full, unsigned long long* empty) {
  float x = 0.f;
  for (int o = 0; o < bytes; o += SLOT, ++k) {
    const int n = bytes - o < SLOT ? bytes - o : SLOT, slot = k % SLOTS;
    mbar_wait(&full[slot], (k / SLOTS) & 1);
    const uint4* q = (const uint4*)(slab + (size_t)slot * SLOT);
    if (n == SLOT) {
#pragma unroll
      for (int i = 0; i < SLOT / 16 / THREADS; ++i) x += fold(q[threadIdx.x + i * THREADS]);
    } else {
      for (int i = threadIdx.x; i < n / 16; i += THREADS) x += fold(q[i]);
    }
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(&empty[slot]);
  }
  return x;
}
// The consumers' block sum of x (every consumer thread gets it).
__device__ __forceinline__ float consumers_total(float x) {
  x = warp_sum(x);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = x;
  consumers_sync(THREADS);
  float tot = 0.f;
#pragma unroll
  for (int j = 0; j < THREADS / 32; ++j) tot += part[j];
  return tot;
}
// PUB: how a CTA publishes a stage: a release add (REL, as mode 1), or a relaxed one (wrong in
// general; what the release costs) alone (RLX) or after a CTA- or cluster-scope fence (CTAF, CLF).
enum Pub { REL, RLX, CTAF, CLF };
// OUT: what a stage writes before its publish: ADDS[s] f32 atomics (ADDS_OUT, as mode 1); every
// CTA adding into all HOT words (ALL_OUT: the down projection's split-k into the residual);
// the same in `ll` words (LL_OUT, below: no counter, fence or poll of anything but the words
// themselves); nothing (NO_OUT).
enum Out { ADDS_OUT, ALL_OUT, LL_OUT, NO_OUT };
// LDWARPS > 0: that many producer warps fill the slots with `ld.global` + `st.shared`.
// GATE >= 0 (modes 44-48): the producer issues at most GATE chunks of a stage before the
// CTA has published the previous one, so the release finds (almost) nothing in flight.
template <int SLOTS, int SLOT, bool WAITS, bool STAMP, int PUB, int OUT = ADDS_OUT, int LDWARPS = 0, int GATE = -1>
__global__ void __launch_bounds__(THREADS + 128, 1) ring_hops(Args a) {
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS], pub[2];
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < SLOTS; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], THREADS / 32);
    }
    mbar_init(&pub[0], 1);
    mbar_init(&pub[1], 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (LDWARPS && tid >= THREADS) {  // producer warps: warp w fills the chunks k = w mod LDWARPS
    const int w = (tid - THREADS) / 32, lane = tid % 32;
    int k = 0;
    for (int step = 0; step < STEPS; ++step) {
      const uint4* mine = (const uint4*)((const char*)a.w + stage_offset(step));
      const int n = W_BYTES[step % STAGES] / SLOT;
      for (int c = 0; c < n; ++c, ++k) {
        if (k % LDWARPS != w) continue;
        const int slot = k % SLOTS, use = k / SLOTS;
        if (use > 0) mbar_wait(&empty[slot], (use - 1) & 1);
        uint4* dst = (uint4*)(slab + (size_t)slot * SLOT);
        const uint4* src = mine + (size_t)c * (SLOT / 16);
        constexpr int PER = 16;  // 8 KiB a warp in flight
        for (int h = 0; h < SLOT / 16; h += 32 * PER) {
          uint4 r[PER];
#pragma unroll
          for (int v = 0; v < PER; ++v) r[v] = __ldcs(src + h + v * 32 + lane);
#pragma unroll
          for (int v = 0; v < PER; ++v) dst[h + v * 32 + lane] = r[v];
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&full[slot]);
      }
    }
    return;
  }
  if (tid >= THREADS) {  // the producer warp: its first lane walks every chunk of every stage
    if (tid == THREADS)
      produce_ring<SLOTS, SLOT>(
          [&](int step, const char** src, int* bytes) {
            *src = (const char*)a.w + stage_offset(step);
            *bytes = W_BYTES[step % STAGES];
          },
          [&](int step, int c) {
            if (GATE >= 0 && step > 0 && c == GATE) mbar_wait(&pub[(step - 1) & 1], ((step - 1) >> 1) & 1);
          },
          full, empty);
    return;
  }
  float acc = 0.f;
  int k = 0;
  for (int step = 0; step < STEPS; ++step) {
    const int s = step % STAGES;
    if (WAITS && step > 0 && OUT != LL_OUT) {
      if (tid == 0) {
        while (ld_acquire(a.sync) < (unsigned)(step * CTAS)) {
        }
        if (STAMP) a.stamps[((size_t)step * CTAS + blockIdx.x) * 2 + 1] = now();
      }
      consumers_sync(THREADS);
    }
    float x;
    if (OUT == LL_OUT) {  // every word this thread reads, polled until all CTAs' adds are in it
      const unsigned need = step * CTAS;
      for (int j = tid; j < HOT; j += THREADS) {
        unsigned long long v;
        do v = ld_relaxed64(a.ll + j);
        while (WAITS && (unsigned)(v & 0xffff) < need);
        if (j == tid % HOT) x = ll_value(v);
      }
    } else {
      x = __ldcg(a.hot + (tid % HOT));
    }
    x += consume_ring<SLOTS, SLOT>(W_BYTES[s], k, full, empty);
    const float tot = consumers_total(x);
    acc += tot;
    if (OUT == ADDS_OUT && tid >= 32 && tid - 32 < ADDS[s]) atomicAdd(a.hot + (blockIdx.x * 7 + tid) % HOT, tot * 1e-9f);
    if (OUT == ALL_OUT)
      for (int j = tid; j < HOT; j += THREADS) atomicAdd(a.hot + j, tot * 1e-9f);
    if (OUT == LL_OUT)
      for (int j = tid; j < HOT; j += THREADS) ll_add(a.ll + j, tot * 1e-9f);
    consumers_sync(THREADS);
    if (OUT == LL_OUT) continue;  // the words are the signal: no counter
    if (tid == 32 && WAITS) {
      if (STAMP) a.stamps[((size_t)step * CTAS + blockIdx.x) * 2] = now();
      if (PUB == CLF) asm volatile("fence.acq_rel.cluster;" ::: "memory");
      if (PUB == CTAF) asm volatile("fence.acq_rel.cta;" ::: "memory");
      if (PUB != REL)
        asm volatile("red.relaxed.gpu.global.add.u32 [%0], 1;" ::"l"(a.sync) : "memory");
      else
        publish(a.sync, 1);
      if (GATE >= 0) mbar_arrive(&pub[step & 1]);
    }
  }
  if (tid == 0) a.sink[blockIdx.x] = acc;
}

// Modes 33-36: hubs. Clusters of CL CTAs: rank 0 streams nothing; ranks 1..CL-1 stream
// their share of every stage through a ring (as mode 19) and never touch global memory's
// counter: each sends its stage output (HOT floats) into its hub's shared memory with
// `st.async` (the hub's mbarrier counts the bytes) and waits on a local mbarrier that the
// hub's `st.async` of the next activation completes. The hub adds its cluster's outputs
// into the hot vector, publishes (red.release), polls for every hub, reads the hot vector
// and sends it to its streamers. So the release and the polls run on SMs with nothing in
// flight (ring64-rlx says that is what a hop under a stream lacks), and nothing the
// streamers do waits on a global round trip.
__host__ __device__ constexpr int hub_bytes(int cl, int s) {  // a streamer's share of stage s
  return ((s == 0 ? 64 : s == 1 ? 32 : 144) * 1024 * cl / (cl - 1) + 1023) / 1024 * 1024;
}
__host__ __device__ constexpr size_t hub_layer_bytes(int cl) {
  return (size_t)(hub_bytes(cl, 0) + hub_bytes(cl, 1) + hub_bytes(cl, 2)) * (CTAS / cl * (cl - 1));
}
__device__ __forceinline__ unsigned remote(const void* p, unsigned rank) {  // p in CTA `rank`
  unsigned r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(sa(p)), "r"(rank));
  return r;
}
__device__ __forceinline__ void send4(unsigned dst, float4 v, unsigned bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
               "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(bar)
               : "memory");
}
// LITE (mode 41): the streamers add their outputs into global memory themselves (relaxed) and
// poll the global counter; each tells its hub with `fence.acq_rel.cluster` and a remote
// mbarrier arrive, and the hub (nothing in flight) publishes with `red.release.gpu` once all
// of its cluster's streamers arrived (the release covers what it acquired from them).
template <int CL, bool WAITS, bool LITE = false>
__global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(THREADS + 32, 1) hub_hops(Args a) {
  constexpr int SLOTS = 4, SLOT = 16 * 1024, NS = CTAS / CL * (CL - 1), VEC = HOT * 4;
  __shared__ __align__(8) unsigned long long full[SLOTS], empty[SLOTS], go[2], in[2], done[2];
  __shared__ __align__(16) float act[2][HOT];  // a streamer's next activations (from its hub)
  const int tid = threadIdx.x, cid = blockIdx.x / CL;
  unsigned rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (tid == 0) {
    for (int i = 0; i < SLOTS; ++i) {
      mbar_init(&full[i], 1);
      mbar_init(&empty[i], THREADS / 32);
    }
    for (int i = 0; i < 2; ++i) {
      mbar_init(&go[i], 1);
      mbar_init(&in[i], 1);
      mbar_init(&done[i], CL - 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();
  float* inbox = (float*)slab;  // the hub's: [2][CL - 1][HOT]
  if (LITE && rank == 0 && WAITS && tid == 0) {  // the lite hub: a publish for its cluster
    for (int step = 0; step + 1 < STEPS; ++step) {
      wait_cluster(&done[step & 1], (step >> 1) & 1);
      publish(a.sync, 1);
    }
  } else if (LITE && rank == 0) {  // the lite hub's other threads: nothing to do
  } else if (rank == 0 && WAITS && tid < THREADS) {  // the hub
    for (int step = 0; step < STEPS; ++step) {
      const int s = step % STAGES, b = step & 1;
      if (tid == 0) mbar_expect(&in[b], (CL - 1) * VEC);
      mbar_wait(&in[b], (step >> 1) & 1);
      for (int i = tid; i < ADDS[s]; i += THREADS) {
        float v = 0.f;
        for (int r = 0; r < CL - 1; ++r) v += inbox[(b * (CL - 1) + r) * HOT + i];
        atomicAdd(a.hot + (cid * 7 + i) % HOT, v * 1e-9f);
      }
      consumers_sync(THREADS);
      if (step + 1 == STEPS) break;
      if (tid == 32) publish(a.sync, 1);
      if (tid == 0) {
        const unsigned target = (step + 1) * (CTAS / CL);
        for (long spin = 0; ld_acquire(a.sync) < target && spin < (1l << 26); ++spin) {
        }
      }
      consumers_sync(THREADS);
      // The next stage's activations to every streamer: act[step & 1], completing go[step & 1].
      if (tid < HOT / 4) {
        const float4 v = __ldcg((const float4*)a.hot + tid);
        for (unsigned r = 1; r < CL; ++r) send4(remote(&act[b][4 * tid], r), v, remote(&go[b], r));
      }
    }
  } else if (rank != 0 && tid >= THREADS) {  // a streamer's producer lane
    const int g = cid * (CL - 1) + rank - 1;
    if (tid == THREADS)
      produce_ring<SLOTS, SLOT>(
          [&](int step, const char** src, int* bytes) {
            const int s = step % STAGES;
            size_t off = (size_t)(step / STAGES) * hub_layer_bytes(CL);
            for (int j = 0; j < s; ++j) off += (size_t)hub_bytes(CL, j) * NS;
            *src = (const char*)a.w + off + (size_t)g * hub_bytes(CL, s);
            *bytes = hub_bytes(CL, s);
          },
          [](int, int) {}, full, empty);
  } else if (rank != 0) {  // a streamer's consumers
    float acc = 0.f;
    int k = 0;
    for (int step = 0; step < STEPS; ++step) {
      const int s = step % STAGES, u = (step - 1) & 1;
      float x;
      if (LITE && WAITS && step > 0) {
        if (tid == 0)
          while (ld_acquire(a.sync) < (unsigned)(step * (CTAS / CL))) {
          }
        consumers_sync(THREADS);
        x = __ldcg(a.hot + (tid % HOT));
      } else if (WAITS && step > 0) {
        if (tid == 0) mbar_expect(&go[u], VEC);
        mbar_wait(&go[u], ((step - 1) >> 1) & 1);
        x = act[u][tid % HOT];
      } else {
        x = __ldcg(a.hot + (tid % HOT));
      }
      x += consume_ring<SLOTS, SLOT>(hub_bytes(CL, s), k, full, empty);
      const float tot = consumers_total(x);
      acc += tot;
      if (LITE && WAITS) {
        if (tid >= 32 && tid - 32 < ADDS[s]) atomicAdd(a.hot + (blockIdx.x * 7 + tid) % HOT, tot * 1e-9f);
        consumers_sync(THREADS);
        if (tid == 32) {
          asm volatile("fence.acq_rel.cluster;" ::: "memory");
          arrive_remote(&done[step & 1], 0);
        }
      } else if (WAITS && tid < HOT / 4) {
        const int b = step & 1;
        send4(remote(&inbox[(b * (CL - 1) + rank - 1) * HOT + 4 * tid], 0), make_float4(tot, tot, tot, tot),
              remote(&in[b], 0));
      }
      consumers_sync(THREADS);  // part[] reused by the next stage
    }
    if (tid == 0) a.sink[blockIdx.x] = acc;
  }
  __syncwarp();
  cluster_sync();  // no CTA leaves while its shared memory may still be written
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

constexpr int K16 = 16 * 1024;  // a ring slot (modes 19-48)
typedef void (*Kernel)(Args);
static const Kernel KERNELS[MODES] = {hops<0>, hops<1>, hops<2>,  hops<3>,  hops<4>,  hops<5>,  hops<6>,
                                      hops<7>, hops<8>, hops<9>, hops<10>, hops<11>, hops<12>, hops<13>,
                                      hops<14>, hops<15>, hops<16>, hops<17>, hops<18>,
                                      ring_hops<4, K16, true, false, REL>, ring_hops<2, K16, true, false, REL>,
                                      ring_hops<3, K16, true, false, REL>, ring_hops<12, K16, false, false, REL>,
                                      ring_hops<4, K16, true, true, REL>, ring_hops<4, K16, true, false, RLX>,
                                      ring_hops<4, K16, true, true, RLX>, ring_hops<2, K16, false, false, REL>,
                                      ring_hops<2, K16, true, true, REL>, ring_hops<4, K16 / 2, true, false, REL>,
                                      ring_hops<4, K16, true, false, REL, NO_OUT>, ring_hops<4, K16, true, false, RLX, NO_OUT>,
                                      ring_hops<4, K16, true, false, REL, ADDS_OUT, 4>, ring_hops<4, K16, true, false, RLX, ADDS_OUT, 4>,
                                      hub_hops<8, true>, hub_hops<8, false>, hub_hops<4, true>, hub_hops<4, false>,
                                      ring_hops<4, K16, true, false, REL, ALL_OUT>, ring_hops<4, K16, true, false, REL, LL_OUT>,
                                      ring_hops<4, K16, false, false, REL, LL_OUT>, ring_hops<4, K16, true, false, RLX, ALL_OUT>,
                                      ring_hops<4, K16, true, false, CLF>, ring_hops<4, K16, true, false, CTAF>,
                                      hub_hops<8, true, true>,
                                      ring_hops<4, K16, true, false, REL, ADDS_OUT, 0, 0>,
                                      ring_hops<4, K16, true, false, REL, ADDS_OUT, 0, 1>,
                                      ring_hops<4, K16, true, false, REL, ADDS_OUT, 0, 2>,
                                      ring_hops<8, K16, true, false, REL, ADDS_OUT, 0, 1>,
                                      ring_hops<8, K16, true, false, REL, ADDS_OUT, 0, 2>};
static const char* NAMES[MODES] = {"nowait",     "global",    "stamped", "tiny-nowait", "tiny",
                                   "tiny-stamped", "mpoll",   "dyn",     "first-smem",  "two-waits",
                                   "first-reg",  "pub-16k",   "pub-32k", "pub-stage",
                                   "relaxed-poll", "fence-red", "l1pf", "l1pf-race", "l2pf",
                                   "ring64", "ring32", "ring48", "ring-nowait", "ring64-st", "ring64-rlx",
                                   "ring64-rlx-st", "ring32-nowait", "ring32-st", "ring32x8k", "ring64-noadd",
                                   "ring64-noadd-rlx", "ldring64", "ldring64-rlx", "hub8", "hub8-nowait", "hub4", "hub4-nowait",
                                   "ring64-all", "ring64-ll", "ll-nowait", "ring64-all-rlx",
                                   "ring64-clf", "ring64-ctaf", "hublite8", "ring64-gate0", "ring64-gate1",
                                   "ring64-gate2", "ring128-gate1", "ring128-gate2"};
constexpr int SMEM[MODES] = {0, 0, 0, 0, 0, 0, 0, 0, 2 * FIRST, 0, 0, 16 * 1024, 32 * 1024, 144 * 1024, 0, 0, 0, 0, 0,
                             4 * K16, 2 * K16, 3 * K16, 12 * K16, 4 * K16, 4 * K16, 4 * K16, 2 * K16, 2 * K16, 2 * K16,
                             4 * K16, 4 * K16, 4 * K16, 4 * K16,
                             4 * K16, 4 * K16, 4 * K16, 4 * K16,
                             4 * K16, 4 * K16, 4 * K16, 4 * K16,
                             4 * K16, 4 * K16, 4 * K16, 4 * K16, 4 * K16, 4 * K16, 8 * K16, 8 * K16};
constexpr bool RING(int m) { return m >= 19; }
constexpr size_t SYNC_WORDS = 64 + 32 * STEPS;

static float run(int mode, Args a) {
  CHECK(cudaMemset(a.sync, 0, SYNC_WORDS * 4));
  CHECK(cudaMemset(a.ll, 0, HOT * 8));
  CHECK(cudaMemset(a.sync + 32, 1, 1));  // mode 9's satisfied word: 1
  return launch_ms([&] { KERNELS[mode]<<<CTAS, THREADS + (mode == 31 || mode == 32 ? 128 : RING(mode) ? 32 : 0), SMEM[mode]>>>(a); });
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
  // The hub modes' streamers take a little more than a CTA's share (112 or 96 of them).
  const size_t alloc = std::max({(size_t)LAYER_BYTES, hub_layer_bytes(8), hub_layer_bytes(4)}) * LAYERS;
  CHECK(cudaMalloc(&w, alloc));
  CHECK(cudaMemset(w, 0x3c, alloc));
  a.w = w;
  CHECK(cudaMalloc(&a.hot, HOT * 4));
  CHECK(cudaMemset(a.hot, 0, HOT * 4));
  CHECK(cudaMalloc(&a.sync, SYNC_WORDS * 4));
  CHECK(cudaMalloc(&a.sink, CTAS * 4));
  CHECK(cudaMalloc(&a.ll, HOT * 8));
  CHECK(cudaMalloc(&a.stamps, (size_t)STEPS * CTAS * 2 * 8));
  for (int m = 0; m < MODES; ++m)
    CHECK(cudaFuncSetAttribute((const void*)KERNELS[m], cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM[m]));
  bool skip[MODES] = {};
  for (int m = 33; m < MODES; ++m) {  // every cluster resident at once, or the hubs would hang
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CTAS);
    cfg.blockDim = dim3(THREADS + 32);
    cfg.dynamicSmemBytes = SMEM[m];
    if (m >= 37 && m != 43) continue;
    int n = 0;
    CHECK(cudaOccupancyMaxActiveClusters(&n, (const void*)KERNELS[m], &cfg));
    const int cl = m < 35 || m == 43 ? 8 : 4;
    printf("%s: %d clusters of %d can be resident (%d needed)\n", NAMES[m], n, cl, CTAS / cl);
    skip[m] = n < CTAS / cl;
  }
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
      const float ms = skip[m] ? 0.f : run(m, a);
      if (r >= 2) t[m].push_back(ms);
    }
  const int hops_n = STEPS - 1;
  float medv[MODES];
  for (int m = 0; m < MODES; ++m) {
    std::sort(t[m].begin(), t[m].end());
    medv[m] = t[m][t[m].size() / 2];
  }
  for (int m = 0; m < MODES; ++m) {
    const float base = m >= 3 && m <= 5 ? medv[3] : m == 43 ? medv[34] : m >= 41 ? medv[22] : m >= 37 ? medv[39] : m >= 35 ? medv[36] : m >= 33 ? medv[34] : m >= 19 ? medv[22] : medv[0];
    printf("%-12s %.4f ms a launch (min %.4f, max %.4f), %.1f GB/s; %.3f us a hop over %s\n", NAMES[m], medv[m],
           t[m].front(), t[m].back(), (m >= 3 && m <= 5 ? 0 : bytes / (medv[m] * 1e6)),
           (medv[m] - base) * 1e3 / hops_n, m >= 3 && m <= 5 ? "tiny-nowait" : m == 43 ? "hub8-nowait" : m >= 41 ? "ring-nowait" : m >= 37 ? "ll-nowait" : m >= 35 ? "hub4-nowait" : m >= 33 ? "hub8-nowait" : m >= 19 ? "ring-nowait" : "nowait");
  }
  std::vector<unsigned long long> st((size_t)STEPS * CTAS * 2);
  for (int m : {2, 5, 23, 25, 27}) {
    run(m, a);  // one more launch of its own, then its stamps
    CHECK(cudaMemcpy(st.data(), a.stamps, st.size() * 8, cudaMemcpyDeviceToHost));
    split(NAMES[m], st);
  }
  return 0;
}
