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

// ==== kernel `rmsnorm` (model/src/kernels/norm.rs) with BLOCK=Int(1024): 4 warps = 128 threads per program, 16 bytes of shared memory ====
__device__ __forceinline__ void rmsnorm_body(int pid0, int pid1, int pid2, int npid0, int npid1, int npid2, bf16_t* x, bf16_t* w, bf16_t* y, int n_cols, float eps, unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  (void)lane; (void)warp; (void)pid0; (void)pid1; (void)pid2; (void)npid0; (void)npid1; (void)npid2;
  // layout L0 = [1024]: thread t owns elements (t + 128*b)*8 + v, b < 1, v < 8
  auto L0_j = [&](int s) { return (tid) * 8 + s % 8; };
  // shared memory
  float* v30_part = (float*)(smem + 0);  // [4] sum(v30) over axis 0: one partial per warp and row

  // ---- prologue ----
  // line 24: program_id(0)
  const int row = pid0;

  // ---- math ----
  // line 26: let mut sumsq = zeros([BLOCK], f32)
  float sumsq[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    sumsq[s] = 0.0f;
  }
  // line 27: for off in (0..n_cols).step_by(BLOCK)
  for (int v6 = 0; v6 < n_cols; v6 += 1024) {
    // line 28: off + arange(0, BLOCK)
    int v7[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v7[s] = L0_j(s);
    }
    int cols[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      cols[s] = v6 + v7[s];
    }
    // line 29: cols < n_cols
    bool mask[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      mask[s] = cols[s] < n_cols;
    }
    // line 30: load(x + row * n_cols + cols, mask, 0.0).to(f32)
    const int v15 = row * n_cols;
    bf16_t* const v16 = x + v15;
    bf16_t* v18[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v18[s] = v16 + cols[s];
    }

    // ---- load ----
    float xb[8];
    {
      uint4 raw[1];
      #pragma unroll
      for (int q = 0; q < 1; ++q)  // one load per 16 bytes, one predicate for its elements
        raw[q] = mask[q * 8] ? *(const uint4*)(v18[q * 8]) : uint4{0u, 0u, 0u, 0u};
      #pragma unroll
      for (int s = 0; s < 8; ++s) {
        xb[s] = tsr_bf16_at(raw[s / 8], s % 8);
      }
    }

    // ---- math ----
    // line 31: sumsq += xb * xb
    float v24[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v24[s] = sumsq[s];
    }
    float v25[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v25[s] = __fmul_rn(xb[s], xb[s]);
    }
    float v26[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v26[s] = v24[s] + v25[s];
    }
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      sumsq[s] = v26[s];
    }
  }
  // line 33: n_cols
  float v27[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v27[s] = sumsq[s];
  }
  // line 33 (rms_inv): rsqrt(sum(sumsq, 0) / n as f32 + eps)
  float v30;
  {  // sum(v30) over axis 0: per-thread partials, warp shuffles, then shared memory
    float acc = 0.0f;
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      acc += v27[s];
    }
    // combine the 32 lanes that share a row: butterfly shuffles
    #pragma unroll
    for (int xor_off = 16; xor_off > 0; xor_off /= 2) {
      acc += __shfl_xor_sync(0xffffffffu, acc, xor_off);
    }
    if (lane == 0) v30_part[warp] = acc;
    __syncthreads();
    acc = 0.0f;
    for (int pw = 0; pw < 4; ++pw) acc += v30_part[pw];
    v30 = acc;
  }
  const float v31 = (float)n_cols;
  const float v32 = v30 / v31;
  const float v33 = v32 + eps;
  const float inv = rsqrtf(v33);
  // line 35: for off in (0..n_cols).step_by(BLOCK)
  for (int v38 = 0; v38 < n_cols; v38 += 1024) {
    // line 36: off + arange(0, BLOCK)
    int v39[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v39[s] = L0_j(s);
    }
    int cols_1[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      cols_1[s] = v38 + v39[s];
    }
    // line 37: cols < n_cols
    bool mask_1[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      mask_1[s] = cols_1[s] < n_cols;
    }
    // line 38: load(x + row * n_cols + cols, mask, 0.0).to(f32)
    const int v47 = row * n_cols;
    bf16_t* const v48 = x + v47;
    bf16_t* v50[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v50[s] = v48 + cols_1[s];
    }

    // ---- load ----
    float xb_1[8];
    {
      uint4 raw[1];
      #pragma unroll
      for (int q = 0; q < 1; ++q)  // one load per 16 bytes, one predicate for its elements
        raw[q] = mask_1[q * 8] ? *(const uint4*)(v50[q * 8]) : uint4{0u, 0u, 0u, 0u};
      #pragma unroll
      for (int s = 0; s < 8; ++s) {
        xb_1[s] = tsr_bf16_at(raw[s / 8], s % 8);
      }
    }
    // line 39: load(w + cols, mask, 0.0).to(f32)
    bf16_t* v58[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v58[s] = w + cols_1[s];
    }
    float wb[8];
    {
      uint4 raw[1];
      #pragma unroll
      for (int q = 0; q < 1; ++q)  // one load per 16 bytes, one predicate for its elements
        raw[q] = mask_1[q * 8] ? *(const uint4*)(v58[q * 8]) : uint4{0u, 0u, 0u, 0u};
      #pragma unroll
      for (int s = 0; s < 8; ++s) {
        wb[s] = tsr_bf16_at(raw[s / 8], s % 8);
      }
    }
    // line 40: store(y + row * n_cols + cols, (xb * inv * wb).to(bf16), mask)
    const int v66 = row * n_cols;
    bf16_t* const v67 = y + v66;
    bf16_t* v69[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v69[s] = v67 + cols_1[s];
    }

    // ---- math ----
    float v71[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v71[s] = __fmul_rn(xb_1[s], inv);
    }
    float v72[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v72[s] = __fmul_rn(v71[s], wb[s]);
    }
    float v73[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v73[s] = tsr_rbf16(v72[s]);
    }

    // ---- epilogue ----
    {
      #pragma unroll
      for (int q = 0; q < 1; ++q) {  // one store per 16 bytes, one predicate for its elements
        if (mask_1[q * 8]) {
          uint4 raw;
          raw.x = tsr_pack_bf16(v73[q * 8 + 0], v73[q * 8 + 1]);
          raw.y = tsr_pack_bf16(v73[q * 8 + 2], v73[q * 8 + 3]);
          raw.z = tsr_pack_bf16(v73[q * 8 + 4], v73[q * 8 + 5]);
          raw.w = tsr_pack_bf16(v73[q * 8 + 6], v73[q * 8 + 7]);
          *(uint4*)(v69[q * 8]) = raw;
        }
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(128) rmsnorm(bf16_t* x, bf16_t* w, bf16_t* y, int n_cols, float eps) {
  __shared__ __align__(16) unsigned char smem[16];
  rmsnorm_body(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, x, w, y, n_cols, eps, smem);
}
