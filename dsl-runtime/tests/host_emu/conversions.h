// CPU versions of the prelude's PTX conversions (round to nearest even).
__device__ __forceinline__ float tsr_bf16_to_f32(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }
__device__ __forceinline__ bf16_t tsr_f32_to_bf16(float f) {
  unsigned u = __float_as_uint(f);
  if (f != f) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}
__device__ __forceinline__ float tsr_f16_to_f32(f16_t h) {
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return (float)x;
}
__device__ __forceinline__ f16_t tsr_f32_to_f16(float f) {
  _Float16 x = (_Float16)f;
  f16_t h;
  std::memcpy(&h, &x, 2);
  return h;
}
// The GPU's ex2.approx: here the host's exp2f, the interpreter's (so the emulation checks the
// code around it bit for bit; the GPU tests hold the approximation to a tolerance).
__device__ __forceinline__ float tsr_ex2(float x) { return exp2f(x); }
