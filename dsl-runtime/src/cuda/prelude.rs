//! The few C helpers every generated kernel uses, defined here so the source needs no
//! headers (NVRTC then compiles it with no include paths). Guarded, so a megakernel can
//! paste several kernel bodies into one translation unit.

pub const PRELUDE: &str = r#"#ifndef TESSERA_PRELUDE
#define TESSERA_PRELUDE
// ---- tessera prelude: storage types and exact conversions (sm_80+) ----
// bf16/f16 live in memory as 16-bit patterns; in registers every value is a float that
// is exactly representable in its dtype (rounded to nearest even after every op).
typedef unsigned short bf16_t;
typedef unsigned short f16_t;

// -- conversions (PTX; a CPU emulator of the generated code swaps this block) --
__device__ __forceinline__ float tsr_bf16_to_f32(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ bf16_t tsr_f32_to_bf16(float f) {
  unsigned short r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
__device__ __forceinline__ float tsr_f16_to_f32(f16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ f16_t tsr_f32_to_f16(float f) {
  unsigned short r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
  return r;
}
// -- end conversions --
// -- staging (PTX, sm_90: the bulk copy engine and mbarriers; a CPU emulator swaps this block) --
// Staged loads (`cuda/staging.rs`): a program's weight tile is copied ahead into shared
// memory by one bulk copy per load. Before sm_90 nothing is copied and every staged load
// reads global memory (the headers say 0 bytes).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TSR_STAGING 1
#else
#define TSR_STAGING 0
#endif
__device__ __forceinline__ unsigned tsr_smem(const void* p) {
  unsigned a;
  asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
  return a;
}
// Every thread: its part [lo, hi) of the bytes a staged load reads, reduced over the CTA
// into r[0] (min) and r[1] (max) (which start as ~0 and 0).
__device__ __forceinline__ void tsr_range_add(unsigned long long* r, unsigned long long lo, unsigned long long hi) {
#if TSR_STAGING
  for (int o = 16; o > 0; o /= 2) {
    const unsigned long long l = __shfl_xor_sync(0xffffffffu, lo, o), h = __shfl_xor_sync(0xffffffffu, hi, o);
    lo = l < lo ? l : lo;
    hi = h > hi ? h : hi;
  }
  if (threadIdx.x % 32 == 0 && hi > lo) { atomicMin(r, lo); atomicMax(r + 1, hi); }
#endif
}
// Thread 0, once the ranges are in: staged load k's header in `stage` (the address of its
// first byte, and how many bytes the copy holds: 0 when the range is not one piece of at
// most `region` bytes, and then the body reads global memory), and r reset for reuse.
__device__ __forceinline__ unsigned tsr_stage_plan(unsigned char* stage, int k, unsigned long long* r, unsigned region) {
  const unsigned long long lo = r[0], hi = r[1];
  r[0] = ~0ull;
  r[1] = 0ull;
  const unsigned n = TSR_STAGING && hi > lo && hi - lo <= region ? (unsigned)(hi - lo) : 0u;
  *(unsigned long long*)(stage + 16 * k) = lo;
  *(unsigned*)(stage + 16 * k + 8) = n;
  return n;
}
// Thread 0: staged load k's header from its box (cuda/footprint.rs): nr rows of nc
// elements of `esize` bytes from `lo`, rows `pitch` elements apart, clamped to the
// [m, n] tile. One piece when there is one row or the rows are contiguous; else, or when
// the bulk copy's 16-byte rules do not hold, 0 bytes (the body reads global memory).
__device__ __forceinline__ void tsr_stage_box(unsigned char* stage, int k, unsigned long long lo, int nr, int nc, int m, int n, long long pitch, int esize, unsigned region) {
  nr = nr < 0 ? 0 : nr > m ? m : nr;
  nc = nc < 0 ? 0 : nc > n ? n : nc;
  const unsigned long long bytes = (nr == 1 || pitch == nc) ? (unsigned long long)nr * nc * esize : 0ull;
  const unsigned len = TSR_STAGING && bytes <= region && lo % 16 == 0 && bytes % 16 == 0 ? (unsigned)bytes : 0u;
  *(unsigned long long*)(stage + 16 * k) = lo;
  *(unsigned*)(stage + 16 * k + 8) = len;
}
// Thread 0: the bytes staged load k's header says its copy holds.
__device__ __forceinline__ unsigned tsr_stage_len(const unsigned char* stage, int k) {
  return *(const unsigned*)(stage + 16 * k + 8);
}
// Thread 0: `bytes` will complete the current phase of `bar` (0: completes it now).
__device__ __forceinline__ void tsr_stage_expect(unsigned long long* bar, unsigned bytes) {
#if TSR_STAGING
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(tsr_smem(bar)), "r"(bytes) : "memory");
#endif
}
// Thread 0: copy staged load k's bytes (its header says where from and how many) to dst.
__device__ __forceinline__ void tsr_stage_copy(unsigned char* dst, const unsigned char* stage, int k, unsigned long long* bar) {
#if TSR_STAGING
  const unsigned long long src = *(const unsigned long long*)(stage + 16 * k);
  const unsigned n = *(const unsigned*)(stage + 16 * k + 8);
  if (n == 0) return;
  // The ring bytes were last read by ordinary loads; the copy engine writes them next.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               :: "r"(tsr_smem(dst)), "l"(src), "r"(n), "r"(tsr_smem(bar)) : "memory");
#endif
}
// Every thread: until phase `parity` of `bar` completes (the program's copies landed).
__device__ __forceinline__ void tsr_stage_wait(unsigned long long* bar, unsigned parity) {
#if TSR_STAGING
  unsigned done = 0;
  while (!done)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(done) : "r"(tsr_smem(bar)), "r"(parity) : "memory");
#endif
}
// Thread 0, before any use: one arrival per phase.
__device__ __forceinline__ void tsr_stage_init(unsigned long long* bar) {
#if TSR_STAGING
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(tsr_smem(bar)) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// A staged load's vector at p: from the copy when it holds p, else from global memory.
template <typename V> __device__ __forceinline__ V tsr_staged(const unsigned char* data, unsigned long long lo, unsigned n, const V* p) {
  const unsigned long long o = (unsigned long long)p - lo;
  return o < n ? *(const V*)(data + o) : *p;
}
// -- end staging --
// Round a float to the nearest bf16 / f16 value (kept in a float register).
__device__ __forceinline__ float tsr_rbf16(float f) { return tsr_bf16_to_f32(tsr_f32_to_bf16(f)); }
__device__ __forceinline__ float tsr_rf16(float f) { return tsr_f16_to_f32(tsr_f32_to_f16(f)); }

// Float -> int as Rust's `as`: truncate toward zero, saturate, NaN -> 0.
__device__ __forceinline__ int tsr_f2i(float f) { return f != f ? 0 : __float2int_rz(f); }

__device__ __forceinline__ float tsr_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float tsr_silu(float x) { return __fmul_rn(x, 1.0f / (1.0f + expf(-x))); }

// Reduction steps for argmax/argmin: ties go to the lower index; NaN never wins over a
// number (two NaNs: the lower index).
template <typename T> __device__ __forceinline__ void tsr_argmax_step(T& v, int& i, T ov, int oi) {
  const bool o_nan = ov != ov, v_nan = v != v;
  if (o_nan ? (v_nan && oi < i) : (v_nan || ov > v || (ov == v && oi < i))) { v = ov; i = oi; }
}
template <typename T> __device__ __forceinline__ void tsr_argmin_step(T& v, int& i, T ov, int oi) {
  const bool o_nan = ov != ov, v_nan = v != v;
  if (o_nan ? (v_nan && oi < i) : (v_nan || ov < v || (ov == v && oi < i))) { v = ov; i = oi; }
}

// A scalar atomic add with acquire and release at GPU scope (`EmitOptions::acq_rel_atomics`):
// after a bar.sync it publishes the CTA's writes, and before one it orders every thread's
// later reads. Returns the old value. The CPU emulation (no __CUDA_ARCH__) fences around a
// C++ atomic instead.
#ifdef __CUDA_ARCH__
__device__ __forceinline__ int tsr_atom_add_acq_rel(int* p, int v) {
  int o;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(o) : "l"(p), "r"(v) : "memory");
  return o;
}
__device__ __forceinline__ float tsr_atom_add_acq_rel(float* p, float v) {
  float o;
  asm volatile("atom.acq_rel.gpu.global.add.f32 %0, [%1], %2;" : "=f"(o) : "l"(p), "f"(v) : "memory");
  return o;
}
#else
template <typename T> __device__ __forceinline__ T tsr_atom_add_acq_rel(T* p, T v) {
  __threadfence();
  const T o = atomicAdd(p, v);
  __threadfence();
  return o;
}
#endif

// atomic max on f32 through the integer order of IEEE bit patterns; NaN is ignored.
// Returns the old value.
__device__ __forceinline__ float tsr_atomic_max_f32(float* p, float v) {
  if (v != v) return *p;
  if (__float_as_int(v) >= 0) return __int_as_float(atomicMax((int*)p, __float_as_int(v)));  // sign bit clear
  return __uint_as_float(atomicMin((unsigned*)p, __float_as_uint(v)));
}

// Element e of a 16-byte vector read as bf16 / f16 / 32-bit lanes (e is a constant after
// unrolling, so these are a shift or a move).
__device__ __forceinline__ unsigned tsr_word(uint4 r, int w) { return w == 0 ? r.x : w == 1 ? r.y : w == 2 ? r.z : r.w; }
__device__ __forceinline__ unsigned tsr_word(uint2 r, int w) { return w == 0 ? r.x : r.y; }
template <typename V> __device__ __forceinline__ float tsr_bf16_at(V r, int e) {
  const unsigned w = tsr_word(r, e / 2);
  return __uint_as_float(e % 2 ? (w & 0xffff0000u) : (w << 16));
}
template <typename V> __device__ __forceinline__ float tsr_f16_at(V r, int e) {
  const unsigned w = tsr_word(r, e / 2);
  return tsr_f16_to_f32((f16_t)(e % 2 ? (w >> 16) : (w & 0xffffu)));
}
template <typename V> __device__ __forceinline__ float tsr_f32_at(V r, int e) { return __uint_as_float(tsr_word(r, e)); }
template <typename V> __device__ __forceinline__ int tsr_i32_at(V r, int e) { return (int)tsr_word(r, e); }
// Set 16-bit element e of a vector (e is a constant after unrolling: a shift and a mask).
__device__ __forceinline__ void tsr_put16(unsigned& w, int e, unsigned short h) {
  w = e % 2 ? (w & 0xffffu) | ((unsigned)h << 16) : (w & 0xffff0000u) | h;
}
__device__ __forceinline__ void tsr_put16(uint4& r, int e, unsigned short h) {
  tsr_put16(e / 2 == 0 ? r.x : e / 2 == 1 ? r.y : e / 2 == 2 ? r.z : r.w, e % 2, h);
}
__device__ __forceinline__ void tsr_put16(uint2& r, int e, unsigned short h) { tsr_put16(e / 2 == 0 ? r.x : r.y, e % 2, h); }
__device__ __forceinline__ unsigned tsr_pack_bf16(float lo, float hi) {
  return (unsigned)tsr_f32_to_bf16(lo) | ((unsigned)tsr_f32_to_bf16(hi) << 16);
}
__device__ __forceinline__ unsigned tsr_pack_f16(float lo, float hi) {
  return (unsigned)tsr_f32_to_f16(lo) | ((unsigned)tsr_f32_to_f16(hi) << 16);
}
#endif // TESSERA_PRELUDE
"#;
