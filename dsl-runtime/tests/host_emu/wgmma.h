// CPU model of the generated code's `wgmma` block (cuda/wgmma.rs), written from the PTX ISA
// (section 9.7.15, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"),
// not from the emitter:
// - 9.7.15.5.1 "Register Fragments and Shared Memory Matrix Layouts", matrix D of
//   .m64nNk16 with f32 accumulators: in a warpgroup (4 consecutive warps), thread
//   t = 32 * w + l of warp w holds d[4i + r] = D[16w + l/4 + 8(r/2)][8i + 2(l%4) + r%2].
// - 9.7.15.5.1.1 shared-memory layouts: a matrix is made of core matrices of 8 rows x 16
//   bytes. K-major (A [m][k], or B [n][k]), swizzle mode of S bytes (32, 64, 128): 8 rows of
//   S bytes each, a row's S bytes holding consecutive k, the next 8 rows ("stride
//   dimension") SBO bytes further. MN-major (B [k][n] with the transpose bit): a row of S
//   bytes holds consecutive n, 8 consecutive k rows S bytes apart, the next 8 k rows SBO
//   further, the next S/2 n ("leading dimension") LBO further. The swizzle permutes the
//   16-byte chunks of each S-byte row inside its 8-row atom: address bits [4, 4+log2(S/16))
//   XOR-ed with bits [7, 7+log2(S/16)) (the pattern repeats every 8 rows, S * 8 bytes,
//   which is why atoms must be aligned to it when the base offset is 0).
// - 9.7.15.5.1.2 "Matrix Descriptor Format": start address bits 0-13, LBO 16-29, SBO 32-45
//   (each the byte value >> 4), base offset 49-51, swizzle 62-63 (1 = 128B, 2 = 64B, 3 = 32B).
// - wgmma.mma_async is asynchronous: it may read its shared-memory operands any time until a
//   later wgmma.wait_group retires its group. The registers are ptxas's business (it waits
//   before any other use of an accumulator register: "wgmma.wait_group is injected"), so the
//   model computes D at the issue, and records the operand bytes it read; at the retiring
//   wait it reads them again and fails if they changed (a ring slot refilled while a wgmma
//   still reads it). Each output is d + sum over the 16 k in ascending order, one fmaf per
//   step (the interpreter's order, so the emulation equals it bit for bit; the GPU's own
//   order is the tolerance's business).
// - Checked protocol: wgmma.fence before a wgmma whose accumulators ordinary code touched
//   (here: since the last wait), fence.proxy.async after this thread's cp.async copies landed
//   and before a wgmma reads shared memory, descriptors with base offset 0 and a swizzle, and
//   1024-byte aligned shared memory.
#include <cstdlib>

inline void tsr_emu_fail(const char* what) {
  std::fprintf(stderr, "wgmma model: %s (thread %u)\n", what, threadIdx.x);
  std::abort();
}

// Shared memory: the generated code's 32-bit .shared addresses are whole host pointers here
// (mma.h), and a descriptor keeps bits 4-17 of one. The emulated `smem` array (g_smem_window,
// g_smem_bytes, set by the harness; 1024-byte aligned, so the swizzle's address bits 4-9
// are the same in a host pointer and in the GPU's window) is where they point back to.
inline uintptr_t tsr_emu_resolve(unsigned window_bits) {
  const uintptr_t base = (uintptr_t)g_smem_window;
  uintptr_t p = (base & ~(uintptr_t)0x3FFFF) | window_bits;
  if (p < base) p += 0x40000;
  return p;
}
inline void tsr_emu_check_in_smem(uintptr_t p) {
  const uintptr_t base = (uintptr_t)g_smem_window;
  if (p < base || p + 2 > base + g_smem_bytes) tsr_emu_fail("a wgmma operand outside shared memory");
}

inline void tsr_wgmma_check_align(const void* smem) {
  if ((uintptr_t)smem % 1024 != 0 || (uintptr_t)g_smem_window % 1024 != 0)
    tsr_emu_fail("shared memory is not 1024-byte aligned");
}

struct TsrDesc { uintptr_t start; unsigned lbo, sbo, base, swizzle_bytes; };
inline TsrDesc tsr_emu_decode(unsigned long long d) {
  TsrDesc x;
  x.start = tsr_emu_resolve((unsigned)(d & 0x3FFF) << 4);
  x.lbo = (unsigned)((d >> 16) & 0x3FFF) << 4;
  x.sbo = (unsigned)((d >> 32) & 0x3FFF) << 4;
  x.base = (unsigned)((d >> 49) & 7);
  const unsigned mode = (unsigned)(d >> 62);
  x.swizzle_bytes = mode == 1 ? 128 : mode == 2 ? 64 : mode == 3 ? 32 : 0;
  if (x.base != 0) tsr_emu_fail("descriptor base offset is not 0");
  if (x.swizzle_bytes == 0) tsr_emu_fail("descriptor without a swizzle (not modelled)");
  return x;
}

// The swizzle on a shared-memory byte address.
inline uintptr_t tsr_emu_swizzle(uintptr_t addr, unsigned s) {
  const uintptr_t mask = s / 16 - 1;
  return addr ^ (((addr >> 7) & mask) << 4);
}

// Element (row, k) of a K-major operand: row in M (or N for B [n][k]), k in 0..16.
inline uintptr_t tsr_emu_k_major(const TsrDesc& x, int row, int k) {
  const uintptr_t a = x.start + (row / 8) * x.sbo + (row % 8) * x.swizzle_bytes + k * 2;
  return tsr_emu_swizzle(a, x.swizzle_bytes);
}
// Element (k, n) of an MN-major operand (B [k][n]).
inline uintptr_t tsr_emu_mn_major(const TsrDesc& x, int k, int n) {
  const int per_row = x.swizzle_bytes / 2;  // n per S-byte row
  const uintptr_t a = x.start + (n / per_row) * x.lbo + (k / 8) * x.sbo +
                     (k % 8) * x.swizzle_bytes + (n % per_row) * 2;
  return tsr_emu_swizzle(a, x.swizzle_bytes);
}

// An issued wgmma: the shared-memory addresses it read and what they held.
struct TsrWgmma {
  std::vector<uintptr_t> addr;
  std::vector<uint16_t> seen;
};
thread_local std::vector<TsrWgmma> tsr_emu_wg_open;
thread_local std::vector<std::vector<TsrWgmma>> tsr_emu_wg_groups;
thread_local bool tsr_emu_wg_fenced = false;

inline unsigned tsr_emu_elem(uintptr_t addr, TsrWgmma& rec) {
  tsr_emu_check_in_smem(addr);
  uint16_t h;
  std::memcpy(&h, (const void*)addr, 2);
  rec.addr.push_back(addr);
  rec.seen.push_back(h);
  return h;
}

// This thread's part of D[64 x n] += A[64 x 16] B[16 x n], now; returns what it read.
inline TsrWgmma tsr_emu_wgmma_run(float* d, int n, unsigned long long a, unsigned long long b,
                                  float (*cvt)(unsigned), bool b_mn) {
  const int w = threadIdx.x / 32 % 4, l = threadIdx.x % 32;
  const TsrDesc da = tsr_emu_decode(a), db = tsr_emu_decode(b);
  TsrWgmma rec;
  for (int i = 0; i < n / 8; ++i)
    for (int r = 0; r < 4; ++r) {
      const int row = 16 * w + l / 4 + 8 * (r / 2), col = 8 * i + 2 * (l % 4) + r % 2;
      float s = d[4 * i + r];
      for (int k = 0; k < 16; ++k) {
        const float x = cvt(tsr_emu_elem(tsr_emu_k_major(da, row, k), rec));
        const uintptr_t bb = b_mn ? tsr_emu_mn_major(db, k, col) : tsr_emu_k_major(db, col, k);
        s = std::fmaf(x, cvt(tsr_emu_elem(bb, rec)), s);
      }
      d[4 * i + r] = s;
    }
  return rec;
}

// mma.h's record of the copies in flight, on before main().
inline const bool tsr_emu_tracking = (tsr_emu_track_copies = true);

// No copy still in flight (mma.h) may land in the 16-byte chunks a wgmma reads: at its
// issue and until it retires.
inline void tsr_emu_no_copy_under(const TsrWgmma& rec, const char* when) {
  std::set<uintptr_t> chunks;
  for (uintptr_t a : rec.addr) chunks.insert(a & ~(uintptr_t)15);
  std::lock_guard<std::mutex> g(tsr_emu_cp_mu);
  for (uintptr_t c : chunks)
    if (tsr_emu_cp_pending.count(c)) tsr_emu_fail(when);
}

// A retiring wgmma: its operands must still hold what it read, and no copy may be on its way
// into them.
inline void tsr_emu_wgmma_retire(const TsrWgmma& rec) {
  tsr_emu_no_copy_under(rec, "a cp.async in flight into shared memory a wgmma reads, before its wgmma.wait_group");
  for (size_t i = 0; i < rec.addr.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, (const void*)rec.addr[i], 2);
    if (h != rec.seen[i]) tsr_emu_fail("shared memory a wgmma reads changed before its wgmma.wait_group");
  }
}

inline void tsr_wgmma_fence() { tsr_emu_wg_fenced = true; }
inline void tsr_wgmma_commit() {
  tsr_emu_wg_groups.push_back(tsr_emu_wg_open);
  tsr_emu_wg_open.clear();
}
template <int N> void tsr_wgmma_wait() {
  while (tsr_emu_wg_groups.size() > (size_t)N) {
    for (auto& rec : tsr_emu_wg_groups.front()) tsr_emu_wgmma_retire(rec);
    tsr_emu_wg_groups.erase(tsr_emu_wg_groups.begin());
  }
  // Reading the accumulators now is ordinary register access: the next wgmma needs a fence.
  tsr_emu_wg_fenced = false;
}
inline void tsr_fence_proxy_async() { tsr_emu_generic_writes = false; }
template <int N> void tsr_wgmma_hold(float*) {}

inline void tsr_emu_wgmma_issue(float* d, int n, unsigned long long a, unsigned long long b,
                                float (*cvt)(unsigned), bool b_mn) {
  if (!tsr_emu_wg_fenced) tsr_emu_fail("wgmma without a wgmma.fence after its accumulators were touched");
  if (tsr_emu_generic_writes) tsr_emu_fail("wgmma reads shared memory that cp.async wrote, with no fence.proxy.async since");
  if (n % 8 != 0 || n < 8 || n > 256) tsr_emu_fail("N is not a multiple of 8 in 8..256");
  tsr_emu_wg_open.push_back(tsr_emu_wgmma_run(d, n, a, b, cvt, b_mn));
  tsr_emu_no_copy_under(tsr_emu_wg_open.back(), "a wgmma reads shared memory a cp.async in flight writes");
}
template <int N> void tsr_wgmma_bf16_nk(float* d, unsigned long long a, unsigned long long b) { tsr_emu_wgmma_issue(d, N, a, b, tsr_emu_bf16, false); }
template <int N> void tsr_wgmma_bf16_kn(float* d, unsigned long long a, unsigned long long b) { tsr_emu_wgmma_issue(d, N, a, b, tsr_emu_bf16, true); }
template <int N> void tsr_wgmma_f16_nk(float* d, unsigned long long a, unsigned long long b) { tsr_emu_wgmma_issue(d, N, a, b, tsr_emu_f16, false); }
template <int N> void tsr_wgmma_f16_kn(float* d, unsigned long long a, unsigned long long b) { tsr_emu_wgmma_issue(d, N, a, b, tsr_emu_f16, true); }
