#ifndef TESSERA_PRELUDE
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
// exp2 as the hardware's approximation, one MUFU.EX2 (about 2 ulp; a result below 2^-126
// flushes to zero; exp2f adds a range check and two multiplies): `EmitOptions::fast_exp2`.
__device__ __forceinline__ float tsr_ex2(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}
// -- end conversions --
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

// f32 adds into 4 (or 2) consecutive floats as one vector reduction
// (`EmitOptions::vector_atomics`): `red.global.add.v4.f32` on sm_90; elsewhere, and in the CPU
// emulation, one atomicAdd each (the same adds).
__device__ __forceinline__ void tsr_red_add_v4(float* p, float a, float b, float c, float d) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
#else
  atomicAdd(p, a); atomicAdd(p + 1, b); atomicAdd(p + 2, c); atomicAdd(p + 3, d);
#endif
}
__device__ __forceinline__ void tsr_red_add_v2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(a), "f"(b) : "memory");
#else
  atomicAdd(p, a); atomicAdd(p + 1, b);
#endif
}

// `prefetch`: the 128-byte line holding `p` into L2 (a hint: no value, no wait); nothing in
// the CPU emulation.
__device__ __forceinline__ void tsr_prefetch(const void* p) {
#ifdef __CUDA_ARCH__
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
#else
  (void)p;
#endif
}

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

// ==== kernel `softmax` (src/kernels/softmax.rs) with BLOCK=Int(1024): 4 warps = 128 threads per program, 32 bytes of shared memory ====
__device__ __forceinline__ void softmax_body(int pid0, int pid1, int pid2, int npid0, int npid1, int npid2, float* x, float* y, int n_cols, unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  (void)lane; (void)warp; (void)pid0; (void)pid1; (void)pid2; (void)npid0; (void)npid1; (void)npid2;
  // layout L0 = [1024]: thread t owns elements (t + 128*b)*4 + v, b < 2, v < 4
  auto L0_j = [&](int s) { return (tid + (s / 4 % 2) * 128) * 4 + s % 4; };
  // shared memory
  float* v14_part = (float*)(smem + 0);  // [4] max(v14) over axis 0: one partial per warp and row
  float* v27_part = (float*)(smem + 16);  // [4] sum(v27) over axis 0: one partial per warp and row

  // ---- prologue ----
  // line 7: program_id(0)
  const int row = pid0;
  // line 8: arange(0, BLOCK)
  int cols[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    cols[s] = L0_j(s);
  }
  // line 9: cols < n_cols
  bool mask[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    mask[s] = cols[s] < n_cols;
  }
  // line 10: load(x + row * n_cols + cols, mask, -3.0e38)
  const int v7 = row * n_cols;
  float* const v8 = x + v7;
  float* v10[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v10[s] = v8 + cols[s];
  }

  // ---- load ----
  float v[8];
  {
    uint4 raw[2];
    #pragma unroll
    for (int q = 0; q < 2; ++q)  // one load per 16 bytes, one predicate for its elements
      raw[q] = mask[q * 4] ? *(const uint4*)(v10[q * 4]) : uint4{__float_as_uint(-3e38f), __float_as_uint(-3e38f), __float_as_uint(-3e38f), __float_as_uint(-3e38f)};
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v[s] = tsr_f32_at(raw[s / 4], s % 4);
    }
  }

  // ---- math ----
  // line 11: exp(v - max(v, 0))
  float v14;
  {  // max(v14) over axis 0: per-thread partials, warp shuffles, then shared memory
    float acc = __uint_as_float(0x7fc00000u);
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      acc = fmaxf(acc, v[s]);
    }
    // combine the 32 lanes that share a row: butterfly shuffles
    #pragma unroll
    for (int xor_off = 16; xor_off > 0; xor_off /= 2) {
      acc = fmaxf(acc, __shfl_xor_sync(0xffffffffu, acc, xor_off));
    }
    if (lane == 0) v14_part[warp] = acc;
    __syncthreads();
    acc = __uint_as_float(0x7fc00000u);
    for (int pw = 0; pw < 4; ++pw) acc = fmaxf(acc, v14_part[pw]);
    v14 = acc;
  }
  float v16[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v16[s] = v[s] - v14;
  }
  float e_1[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    e_1[s] = expf(v16[s]);
  }
  // line 12: where_(mask, e, 0.0)
  float e_2[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    e_2[s] = mask[s] ? e_1[s] : 0.0f;
  }
  // line 13: store(y + row * n_cols + cols, e / sum(e, 0), mask)
  const int v23 = row * n_cols;
  float* const v24 = y + v23;
  float* v26[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v26[s] = v24 + cols[s];
  }
  float v27;
  {  // sum(v27) over axis 0: per-thread partials, warp shuffles, then shared memory
    float acc = 0.0f;
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      acc += e_2[s];
    }
    // combine the 32 lanes that share a row: butterfly shuffles
    #pragma unroll
    for (int xor_off = 16; xor_off > 0; xor_off /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, xor_off);
    }
    if (lane == 0) v27_part[warp] = acc;
    __syncthreads();
    acc = 0.0f;
    for (int pw = 0; pw < 4; ++pw) acc += v27_part[pw];
    v27 = acc;
  }
  float v29[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v29[s] = e_2[s] / v27;
  }

  // ---- epilogue ----
  {
    #pragma unroll
    for (int q = 0; q < 2; ++q) {  // one store per 16 bytes, one predicate for its elements
      if (mask[q * 4]) {
        uint4 raw;
        raw.x = __float_as_uint(v29[q * 4 + 0]);
        raw.y = __float_as_uint(v29[q * 4 + 1]);
        raw.z = __float_as_uint(v29[q * 4 + 2]);
        raw.w = __float_as_uint(v29[q * 4 + 3]);
        *(uint4*)(v26[q * 4]) = raw;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(128) softmax(float* x, float* y, int n_cols) {
  __shared__ __align__(16) unsigned char smem[32];
  softmax_body(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, x, y, n_cols, smem);
}
