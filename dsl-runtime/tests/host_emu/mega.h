// CPU versions of the megakernel's synchronisation primitives (C++ atomics; waits yield).
__device__ __forceinline__ unsigned long long tsr_now() {
  return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
__device__ __forceinline__ unsigned tsr_ld_acquire(const unsigned* p) {
  std::this_thread::yield();
  return std::atomic_ref<unsigned>(*const_cast<unsigned*>(p)).load(std::memory_order_acquire);
}
__device__ __forceinline__ void tsr_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
__device__ __forceinline__ void tsr_red_release(unsigned* p, unsigned v) {
  std::atomic_ref<unsigned>(*p).fetch_add(v, std::memory_order_release);
}
