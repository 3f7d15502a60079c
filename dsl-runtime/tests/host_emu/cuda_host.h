// Just enough of CUDA to run generated code on the CPU: one OS thread per CUDA thread, a
// std::barrier per CTA for __syncthreads and one per warp for shuffles.
// Used by dsl-runtime/tests/emit_host.rs (a kernel body, one CTA at a time) to check the
// emitter's index math, reductions and shared memory protocol, and by
// tests/megakernel_host.rs (a whole persistent kernel, every CTA at once) to check the
// megakernel's counters and barriers, against references without a GPU
// (races are not exhaustively found).
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#define __device__
#define __forceinline__ inline
#define __noinline__
#define __global__
#define __launch_bounds__(x)
#define __shared__ static
#define __align__(n) alignas(n)

struct dim3 { unsigned x = 0, y = 0, z = 0; };
struct alignas(16) uint4 { unsigned x, y, z, w; };
struct alignas(8) uint2 { unsigned x, y; };

thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim, blockDim;

struct Warp {
  std::barrier<>* bar;
  uint64_t buf[32];
  // Exchange for the warp-wide models of ldmatrix and mma.sync (mma.h).
  const void* xp[32];
  unsigned xu[32][6];
};
thread_local std::barrier<>* g_cta;
thread_local Warp* g_warps;
// The CTA's dynamic shared memory (`launch_persistent`).
thread_local unsigned char* g_dyn;
// A kernel body's `smem` (host_emu/kernel.rs), for the wgmma model's descriptors (wgmma.h).
inline unsigned char* g_smem_window;
inline size_t g_smem_bytes;

inline void __syncthreads() { g_cta->arrive_and_wait(); }

template <typename T> T __shfl_xor_sync(unsigned, T v, int off) {
  const int t = threadIdx.x, lane = t % 32;
  Warp& w = g_warps[t / 32];
  std::memcpy(&w.buf[lane], &v, sizeof(T));
  w.bar->arrive_and_wait();
  T r;
  std::memcpy(&r, &w.buf[lane ^ off], sizeof(T));
  w.bar->arrive_and_wait();
  return r;
}

inline float __uint_as_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline int __float2int_rz(float f) {
  if (f >= 2147483648.0f) return 2147483647;
  if (f <= -2147483648.0f) return (-2147483647 - 1);
  return (int)f;
}

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline int atomicAdd(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
template <typename T> T atomic_cas_op(T* p, T v, bool max) {
  std::atomic_ref<T> a(*p);
  T old = a.load();
  while ((max ? v > old : v < old) && !a.compare_exchange_weak(old, v)) {}
  return old;
}
inline int atomicMax(int* p, int v) { return atomic_cas_op(p, v, true); }
inline int atomicMin(int* p, int v) { return atomic_cas_op(p, v, false); }
inline unsigned atomicMin(unsigned* p, unsigned v) { return atomic_cas_op(p, v, false); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }
inline unsigned atomicExch(unsigned* p, unsigned v) { return std::atomic_ref<unsigned>(*p).exchange(v); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// Runs `body(tid)` for every thread of `grid` CTAs of `threads` threads, one CTA at a time.
inline void launch(dim3 grid, int threads, const std::function<void()>& body) {
  gridDim = grid;
  blockDim = dim3{(unsigned)threads, 1, 1};
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::barrier<> cta(threads);
        std::vector<Warp> warps(threads / 32);
        for (auto& w : warps) w.bar = new std::barrier<>(32);
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
          ts.emplace_back([&, t, x, y, z] {
            g_cta = &cta;
            g_warps = warps.data();
            threadIdx.x = t;
            blockIdx = dim3{x, y, z};
            body();
          });
        for (auto& t : ts) t.join();
        for (auto& w : warps) delete w.bar;
      }
}

// Runs `body()` for every thread of every CTA of a persistent grid at once (CTAs wait on
// each other), each CTA with `dyn` bytes of its own dynamic shared memory.
inline void launch_persistent(dim3 grid, int threads, size_t dyn, const std::function<void()>& body) {
  gridDim = grid;
  blockDim = dim3{(unsigned)threads, 1, 1};
  struct Cta {
    std::barrier<> bar;
    std::vector<Warp> warps;
    std::vector<unsigned char> smem;
    Cta(int threads, size_t dyn) : bar(threads), warps(threads / 32), smem(dyn + 128) {
      for (auto& w : warps) w.bar = new std::barrier<>(32);
    }
    ~Cta() { for (auto& w : warps) delete w.bar; }
  };
  std::vector<std::unique_ptr<Cta>> ctas;
  for (unsigned x = 0; x < grid.x; ++x) ctas.emplace_back(new Cta(threads, dyn));
  std::vector<std::thread> ts;
  for (unsigned x = 0; x < grid.x; ++x)
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, x, t] {
        Cta& c = *ctas[x];
        g_cta = &c.bar;
        g_warps = c.warps.data();
        const uintptr_t a = (uintptr_t)c.smem.data();
        g_dyn = (unsigned char*)((a + 127) & ~(uintptr_t)127);
        threadIdx.x = t;
        blockIdx = dim3{x, 0, 0};
        body();
      });
  for (auto& t : ts) t.join();
}

inline std::vector<unsigned char> read_file(const char* path) {
  std::vector<unsigned char> v;
  FILE* f = std::fopen(path, "rb");
  if (!f) { std::perror(path); std::exit(2); }
  unsigned char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) v.insert(v.end(), buf, buf + n);
  std::fclose(f);
  v.resize(v.size() + 64);  // slack: an unmasked out-of-range access stays in the buffer
  return v;
}
inline void write_file(const char* path, const std::vector<unsigned char>& v, size_t n) {
  FILE* f = std::fopen(path, "wb");
  std::fwrite(v.data(), 1, n, f);
  std::fclose(f);
}
