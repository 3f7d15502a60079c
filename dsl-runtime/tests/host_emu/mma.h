// CPU models of the generated code's `mma` block (cuda/dot.rs: MMA_HELPERS), so the g++
// emulation checks fragment layouts, swizzles and the cp.async ring without a GPU.
// - ldmatrix .x4 [.trans]: lanes 8i..8i+7 give the row addresses of 8x8 b16 matrix i;
//   lane l gets, of matrix i, row l/4, columns 2(l%4), +1 (transposed: rows 2(l%4), +1 of
//   column l/4), low half first.
// - mma.sync m16n8k16 row.col, f32 accumulators: the fragments are gathered across the
//   warp and each output is c + sum over k in ascending order with one fmaf per step,
//   which is the interpreter's order, so the emulation must equal it bit for bit (the GPU's
//   tensor cores sum in their own order: the GPU contract is a tolerance).
// - cp.async: copies are queued per thread and done at commit-group granularity when
//   `cp.async.wait_group N` retires all but the newest N groups, so reading a ring slot
//   before its wait shows stale data instead of passing by luck.
#include <mutex>
#include <set>
#include <vector>
inline void tsr_ldmatrix_model(unsigned* r, const void* p, bool trans) {
  const int t = threadIdx.x, lane = t % 32;
  Warp& w = g_warps[t / 32];
  w.xp[lane] = p;
  w.bar->arrive_and_wait();
  for (int i = 0; i < 4; ++i) {
    if (!trans) {
      std::memcpy(&r[i], (const unsigned char*)w.xp[i * 8 + lane / 4] + 4 * (lane % 4), 4);
    } else {
      uint16_t lo, hi;
      std::memcpy(&lo, (const unsigned char*)w.xp[i * 8 + 2 * (lane % 4)] + 2 * (lane / 4), 2);
      std::memcpy(&hi, (const unsigned char*)w.xp[i * 8 + 2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
      r[i] = (unsigned)lo | ((unsigned)hi << 16);
    }
  }
  w.bar->arrive_and_wait();
}
// A shared-memory address is the whole pointer as an integer here, so the generated
// base-plus-offset arithmetic lands on the same bytes the GPU's 32-bit .shared address does.
typedef unsigned long long tsr_saddr;
inline tsr_saddr tsr_saddr_of(const void* p) { return (tsr_saddr)(uintptr_t)p; }
inline void tsr_ldmatrix_x4(unsigned* r, tsr_saddr a) { tsr_ldmatrix_model(r, (const void*)(uintptr_t)a, false); }
inline void tsr_ldmatrix_x4_trans(unsigned* r, tsr_saddr a) { tsr_ldmatrix_model(r, (const void*)(uintptr_t)a, true); }

inline float tsr_emu_bf16(unsigned h) { return __uint_as_float((h & 0xffffu) << 16); }
inline float tsr_emu_f16(unsigned h) {
  _Float16 x;
  uint16_t b = (uint16_t)h;
  std::memcpy(&x, &b, 2);
  return (float)x;
}
inline void tsr_mma_model(float* d, const unsigned* a, const unsigned* b, float (*cvt)(unsigned)) {
  const int t = threadIdx.x, lane = t % 32;
  Warp& w = g_warps[t / 32];
  for (int i = 0; i < 4; ++i) w.xu[lane][i] = a[i];
  w.xu[lane][4] = b[0];
  w.xu[lane][5] = b[1];
  w.bar->arrive_and_wait();
  float A[16][16], B[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, q = l % 4;
    const unsigned* x = w.xu[l];
    for (int h = 0; h < 2; ++h) {
      A[g][2 * q + h] = cvt(x[0] >> (16 * h));
      A[g + 8][2 * q + h] = cvt(x[1] >> (16 * h));
      A[g][2 * q + 8 + h] = cvt(x[2] >> (16 * h));
      A[g + 8][2 * q + 8 + h] = cvt(x[3] >> (16 * h));
      B[2 * q + h][g] = cvt(x[4] >> (16 * h));
      B[2 * q + 8 + h][g] = cvt(x[5] >> (16 * h));
    }
  }
  w.bar->arrive_and_wait();
  const int g = lane / 4, q = lane % 4;
  for (int r = 0; r < 4; ++r) {
    const int row = g + 8 * (r / 2), col = 2 * q + r % 2;
    float s = d[r];
    for (int k = 0; k < 16; ++k) s = std::fmaf(A[row][k], B[k][col], s);
    d[r] = s;
  }
}
inline void tsr_mma_bf16(float* d, const unsigned* a, const unsigned* b) { tsr_mma_model(d, a, b, tsr_emu_bf16); }
inline void tsr_mma_f16(float* d, const unsigned* a, const unsigned* b) { tsr_mma_model(d, a, b, tsr_emu_f16); }

struct TsrCopy { void* dst; const void* src; bool pred; };
thread_local std::vector<TsrCopy> tsr_emu_open;
thread_local std::vector<std::vector<TsrCopy>> tsr_emu_groups;
// Every thread's issued copies that have not landed (their 16-byte destinations): on the GPU
// they may land any time before the wait, so wgmma.h fails a wgmma reading one. Tracked only
// where wgmma.h is in (it sets the flag): the lock costs the mma.sync emulations time.
inline bool tsr_emu_track_copies = false;
inline std::mutex tsr_emu_cp_mu;
inline std::multiset<uintptr_t> tsr_emu_cp_pending;
inline void tsr_cp_async16(void* dst, const void* src, bool pred) {
  tsr_emu_open.push_back({dst, src, pred});
  if (!tsr_emu_track_copies) return;
  std::lock_guard<std::mutex> g(tsr_emu_cp_mu);
  tsr_emu_cp_pending.insert((uintptr_t)dst);
}
// Stepped copies: the destination as a tsr_saddr (here the whole pointer).
inline void tsr_cp_async16_at(tsr_saddr dst, const void* src, bool pred) { tsr_cp_async16((void*)(uintptr_t)dst, src, pred); }
inline void tsr_cp_async_commit() {
  tsr_emu_groups.push_back(tsr_emu_open);
  tsr_emu_open.clear();
}
// Set when this thread's copies land (written through the generic proxy); wgmma.h's
// fence.proxy.async clears it, and its wgmma requires it clear.
thread_local bool tsr_emu_generic_writes = false;
template <int N> void tsr_cp_async_wait() {
  while (tsr_emu_groups.size() > (size_t)N) {
    tsr_emu_generic_writes |= !tsr_emu_groups.front().empty();
    if (tsr_emu_track_copies) {
      std::lock_guard<std::mutex> g(tsr_emu_cp_mu);
      for (auto& c : tsr_emu_groups.front()) tsr_emu_cp_pending.erase(tsr_emu_cp_pending.find((uintptr_t)c.dst));
    }
    for (auto& c : tsr_emu_groups.front()) {
      if (c.pred) std::memcpy(c.dst, c.src, 16);
      else std::memset(c.dst, 0, 16);
    }
    tsr_emu_groups.erase(tsr_emu_groups.begin());
  }
}
