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

// ==== kernel `gemv` (src/kernels/gemv.rs) with BM=Int(8), BK=Int(512): 4 warps = 128 threads per program, 96 bytes of shared memory ====
__device__ __forceinline__ void gemv_body(int pid0, int pid1, int pid2, int npid0, int npid1, int npid2, bf16_t* w, bf16_t* x, bf16_t* y, int m, int k, unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  (void)lane; (void)warp; (void)pid0; (void)pid1; (void)pid2; (void)npid0; (void)npid1; (void)npid2;
  // layout L0 = [8]: thread t holds elements (t%1 + 1*b)*8 + v, b < 1, v < 8; only thread 0 own them, the others are replicas (they load and compute, never store or reduce)
  auto L0_j = [&](int s) { return s % 8; };
  const bool L0_owner = tid < 1;  // false for replicas: they never store or reduce
  // layout L1 = [8, 512]: 64 threads per row, 2 rows per pass; thread t owns rows t/64 + 2*a (a < 4), columns (t%64 + 64*b)*8 + v (b < 1, v < 8)
  auto L1_i = [&](int s) { return tid / 64 + (s / 8) * 2; };
  auto L1_j = [&](int s) { return (tid % 64) * 8 + s % 8; };
  // layout L2 = [512]: thread t holds elements (t%64 + 64*b)*8 + v, b < 1, v < 8; only threads 0..63 own them, the others are replicas (they load and compute, never store or reduce)
  auto L2_j = [&](int s) { return (tid % 64) * 8 + s % 8; };
  // layout L3 = [8, 1]: 1 threads per row, 128 rows per pass; thread t owns rows t/1 + 128*a (a < 1), columns (t%1 + 1*b)*1 + v (b < 1, v < 1)
  // layout L4 = [1, 512]: thread t holds elements (t%64 + 64*b)*8 + v, b < 1, v < 8; only threads 0..63 own them, the others are replicas (they load and compute, never store or reduce)
  // shared memory
  float* v59_part = (float*)(smem + 0);  // [16] sum(v59) over axis 1: one partial per warp and row
  float* v59_res = (float*)(smem + 64);  // [8] sum(v59) over axis 1: one result per row

  // ---- prologue ----
  // line 19: program_id(0) * BM + arange(0, BM)
  const int v0 = pid0;
  const int v2 = v0 * 8;
  int v3[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v3[s] = L0_j(s);
  }
  int rows[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    rows[s] = v2 + v3[s];
  }
  // line 20: rows < m
  bool row_mask[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    row_mask[s] = rows[s] < m;
  }

  // ---- math ----
  // line 21: let mut acc = zeros([BM, BK], f32)
  float acc_1[32];
  #pragma unroll
  for (int s = 0; s < 32; ++s) {
    acc_1[s] = 0.0f;
  }
  // line 22: for k0 in (0..k).step_by(BK)
  for (int v14 = 0; v14 < k; v14 += 512) {
    // line 23: k0 + arange(0, BK)
    int v15[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v15[s] = L2_j(s);
    }
    int cols[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      cols[s] = v14 + v15[s];
    }
    // line 24: cols < k
    bool col_mask[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      col_mask[s] = cols[s] < k;
    }
    // line 25: load(x + cols, col_mask, 0.0).to(f32)
    bf16_t* v23[8];
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v23[s] = x + cols[s];
    }

    // ---- load ----
    float xv[8];
    {
      uint4 raw[1];
      #pragma unroll
      for (int q = 0; q < 1; ++q)  // one load per 16 bytes, one predicate for its elements
        raw[q] = col_mask[q * 8] ? *(const uint4*)(v23[q * 8]) : uint4{0u, 0u, 0u, 0u};
      #pragma unroll
      for (int s = 0; s < 8; ++s) {
        xv[s] = tsr_bf16_at(raw[s / 8], s % 8);
      }
    }
    // line 26: row_mask.expand_dims(1) & col_mask.expand_dims(0)
    bool tile_mask[32];
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      tile_mask[s] = ((v2 + L1_i(s)) < m) && ((v14 + L1_j(s)) < k);
    }
    // line 28: w + rows.expand_dims(1) * k + cols.expand_dims(0)
    bf16_t* v44[32];
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      v44[s] = (w + ((v2 + L1_i(s)) * k)) + (v14 + L1_j(s));
    }
    // line 27: load( w + rows.expand_dims(1) * k + cols.expand_dims(0), tile_mask, 0.0, ) .to(f32)
    float wv[32];
    {
      uint4 raw[4];
      #pragma unroll
      for (int q = 0; q < 4; ++q)  // one load per 16 bytes, one predicate for its elements
        raw[q] = tile_mask[q * 8] ? *(const uint4*)(v44[q * 8]) : uint4{0u, 0u, 0u, 0u};
      #pragma unroll
      for (int s = 0; s < 32; ++s) {
        wv[s] = tsr_bf16_at(raw[s / 8], s % 8);
      }
    }

    // ---- math ----
    // line 33: acc += wv * xv.expand_dims(0)
    float v50[32];
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      v50[s] = acc_1[s];
    }
    float v51[8];  // each thread already holds these elements: a register copy
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v51[s] = xv[s];
    }
    float v52[32];  // each thread already holds these elements: a register copy
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      v52[s] = v51[s % 8];
    }
    float v53[32];
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      v53[s] = __fmul_rn(wv[s], v52[s]);
    }
    float v54[32];
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      v54[s] = v50[s] + v53[s];
    }
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      acc_1[s] = v54[s];
    }
  }
  // line 35: store(y + rows, sum(acc, 1).to(bf16), row_mask)
  bf16_t* v57[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v57[s] = y + rows[s];
  }
  float v58[32];
  #pragma unroll
  for (int s = 0; s < 32; ++s) {
    v58[s] = acc_1[s];
  }
  float v59[8];
  {  // sum(v59) over axis 1: per-thread partials, warp shuffles, then shared memory
    float acc[4];
    #pragma unroll
    for (int a = 0; a < 4; ++a) acc[a] = 0.0f;
    #pragma unroll
    for (int s = 0; s < 32; ++s) {
      acc[s / 8] += v58[s];
    }
    // combine the 32 lanes that share a row: butterfly shuffles
    #pragma unroll
    for (int xor_off = 16; xor_off > 0; xor_off /= 2) {
      #pragma unroll
      for (int a = 0; a < 4; ++a) acc[a] += __shfl_xor_sync(0xffffffffu, acc[a], xor_off);
    }
    #pragma unroll
    for (int a = 0; a < 4; ++a) if (lane == 0) v59_part[(tid / 64 + a * 2) * 2 + (tid % 64) / 32] = acc[a];
    __syncthreads();
    for (int o = tid; o < 8; o += 128) {
      float r = 0.0f;
      for (int pw = 0; pw < 2; ++pw) r += v59_part[o * 2 + pw];
      v59_res[o] = r;
    }
    __syncthreads();
    #pragma unroll
    for (int s = 0; s < 8; ++s) {
      v59[s] = v59_res[L0_j(s)];
    }
  }
  float v60[8];
  #pragma unroll
  for (int s = 0; s < 8; ++s) {
    v60[s] = tsr_rbf16(v59[s]);
  }

  // ---- epilogue ----
  {
    #pragma unroll
    for (int q = 0; q < 1; ++q) {  // one store per 16 bytes, one predicate for its elements
      if (L0_owner && row_mask[q * 8]) {
        uint4 raw;
        raw.x = tsr_pack_bf16(v60[q * 8 + 0], v60[q * 8 + 1]);
        raw.y = tsr_pack_bf16(v60[q * 8 + 2], v60[q * 8 + 3]);
        raw.z = tsr_pack_bf16(v60[q * 8 + 4], v60[q * 8 + 5]);
        raw.w = tsr_pack_bf16(v60[q * 8 + 6], v60[q * 8 + 7]);
        *(uint4*)(v57[q * 8]) = raw;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(128) gemv(bf16_t* w, bf16_t* x, bf16_t* y, int m, int k) {
  __shared__ __align__(16) unsigned char smem[96];
  gemv_body(blockIdx.x, blockIdx.y, blockIdx.z, gridDim.x, gridDim.y, gridDim.z, w, x, y, m, k, smem);
}
