// CPU versions of the prelude's staging: copies happen at once, so waits are no-ops.
#define TSR_STAGING 1
// Bytes the copies held over the run (the test checks that staging happened).
inline std::atomic<unsigned long long> tsr_emu_staged{0};
__device__ __forceinline__ void tsr_range_add(unsigned long long* r, unsigned long long lo, unsigned long long hi) {
  if (hi > lo) {
    std::atomic_ref<unsigned long long> a(r[0]), b(r[1]);
    for (unsigned long long o = a.load(); lo < o && !a.compare_exchange_weak(o, lo);) {}
    for (unsigned long long o = b.load(); hi > o && !b.compare_exchange_weak(o, hi);) {}
  }
}
__device__ __forceinline__ unsigned tsr_stage_plan(unsigned char* stage, int k, unsigned long long* r, unsigned region) {
  const unsigned long long lo = r[0], hi = r[1];
  r[0] = ~0ull;
  r[1] = 0ull;
  const unsigned n = hi > lo && hi - lo <= region ? (unsigned)(hi - lo) : 0u;
  std::memcpy(stage + 16 * k, &lo, 8);
  std::memcpy(stage + 16 * k + 8, &n, 4);
  tsr_emu_staged += n;
  return n;
}
__device__ __forceinline__ void tsr_stage_expect(unsigned long long*, unsigned) {}
__device__ __forceinline__ void tsr_stage_copy(unsigned char* dst, const unsigned char* stage, int k, unsigned long long*) {
  unsigned long long src;
  unsigned n;
  std::memcpy(&src, stage + 16 * k, 8);
  std::memcpy(&n, stage + 16 * k + 8, 4);
  if (n) std::memcpy(dst, (const void*)src, n);
}
__device__ __forceinline__ void tsr_stage_wait(unsigned long long*, unsigned) {}
__device__ __forceinline__ void tsr_stage_init(unsigned long long*) {}
template <typename V> __device__ __forceinline__ V tsr_staged(const unsigned char* data, unsigned long long lo, unsigned n, const V* p) {
  const unsigned long long o = (unsigned long long)p - lo;
  V v;
  std::memcpy(&v, o < n ? (const void*)(data + o) : (const void*)p, sizeof(V));
  return v;
}
