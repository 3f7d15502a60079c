// CPU versions of the prelude's staging: bulk copies are memcpy, and an mbarrier is
// emulated as the hardware counts: a phase completes when its one arrival (thread 0's
// `expect`) has come and every expected byte has been copied.
#define TSR_STAGING 1
#include <map>
#include <mutex>
// Bytes the copies held over the run, and bytes staged loads then took from them (the
// tests check that staging happened, and that the readers found it).
inline std::atomic<unsigned long long> tsr_emu_staged{0}, tsr_emu_hits{0};
// Headers written from a load's box (cuda/footprint.rs) rather than reduced ranges.
inline std::atomic<unsigned long long> tsr_emu_boxed{0};
struct TsrBar {
  long long tx = 0;        // bytes expected and not yet copied
  int pending = 1;         // arrivals still to come this phase
  unsigned completed = 0;  // phases completed
};
inline std::mutex tsr_bar_mu;
inline std::map<const void*, TsrBar> tsr_bars;
inline void tsr_bar_check(TsrBar& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.completed;
    b.pending = 1;
  }
}
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
__device__ __forceinline__ void tsr_stage_box(unsigned char* stage, int k, unsigned long long lo, int nr, int nc, int m, int n, long long pitch, int esize, unsigned region) {
  nr = nr < 0 ? 0 : nr > m ? m : nr;
  nc = nc < 0 ? 0 : nc > n ? n : nc;
  const unsigned long long bytes = (nr == 1 || pitch == nc) ? (unsigned long long)nr * nc * esize : 0ull;
  const unsigned len = bytes <= region && lo % 16 == 0 && bytes % 16 == 0 ? (unsigned)bytes : 0u;
  std::memcpy(stage + 16 * k, &lo, 8);
  std::memcpy(stage + 16 * k + 8, &len, 4);
  tsr_emu_staged += len;
  tsr_emu_boxed += 1;
}
__device__ __forceinline__ unsigned tsr_stage_len(const unsigned char* stage, int k) {
  unsigned n;
  std::memcpy(&n, stage + 16 * k + 8, 4);
  return n;
}
__device__ __forceinline__ void tsr_stage_expect(unsigned long long* bar, unsigned bytes) {
  std::lock_guard<std::mutex> g(tsr_bar_mu);
  TsrBar& b = tsr_bars[bar];
  b.tx += bytes;
  b.pending -= 1;
  tsr_bar_check(b);
}
__device__ __forceinline__ void tsr_stage_copy(unsigned char* dst, const unsigned char* stage, int k, unsigned long long* bar) {
  unsigned long long src;
  unsigned n;
  std::memcpy(&src, stage + 16 * k, 8);
  std::memcpy(&n, stage + 16 * k + 8, 4);
  if (n == 0) return;
  std::memcpy(dst, (const void*)src, n);
  std::lock_guard<std::mutex> g(tsr_bar_mu);
  TsrBar& b = tsr_bars[bar];
  b.tx -= n;
  tsr_bar_check(b);
}
__device__ __forceinline__ void tsr_stage_wait(unsigned long long* bar, unsigned parity) {
  for (;;) {
    {
      std::lock_guard<std::mutex> g(tsr_bar_mu);
      // Phase `parity` (of the current pair) has completed once the count of completed
      // phases has the other parity.
      if ((tsr_bars[bar].completed & 1u) != parity) return;
    }
    std::this_thread::yield();
  }
}
__device__ __forceinline__ void tsr_stage_init(unsigned long long* bar) {
  std::lock_guard<std::mutex> g(tsr_bar_mu);
  tsr_bars[bar] = TsrBar{};
}
template <typename V> __device__ __forceinline__ V tsr_staged(const unsigned char* data, unsigned long long lo, unsigned n, const V* p) {
  const unsigned long long o = (unsigned long long)p - lo;
  V v;
  std::memcpy(&v, o < n ? (const void*)(data + o) : (const void*)p, sizeof(V));
  if (o < n) tsr_emu_hits += sizeof(V);
  return v;
}
