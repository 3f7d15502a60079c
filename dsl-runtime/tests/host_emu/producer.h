// CPU versions of the producer protocol's primitives (mega/cuda.rs, PRODUCER_PRELUDE): the
// compute warps' named barrier, and the empty mbarriers' arrival and test, counted as the
// hardware counts them (staging.h's TsrBar).
inline std::atomic<unsigned long long> tsr_emu_freed{0};  // empty-mbarrier arrivals
__device__ __forceinline__ void tsr_consumers_sync() { g_named->arrive_and_wait(); }
__device__ __forceinline__ void tsr_stage_arrive(unsigned long long* bar) {
  std::lock_guard<std::mutex> g(tsr_bar_mu);
  TsrBar& b = tsr_bars[bar];
  b.pending -= 1;
  tsr_bar_check(b);
  tsr_emu_freed += 1;
}
__device__ __forceinline__ bool tsr_stage_done(unsigned long long* bar, unsigned parity) {
  std::this_thread::yield();
  std::lock_guard<std::mutex> g(tsr_bar_mu);
  return (tsr_bars[bar].completed & 1u) != parity;
}
