// CPU models of the generated code's `mma_saddr` block (cuda/dot.rs: MMA_SADDR_HELPERS,
// `DotOptions::lane_bases`): a shared-memory address is the whole pointer as an integer, so
// the generated base-plus-offset arithmetic lands on the same bytes the GPU's 32-bit
// .shared address does, and the ldmatrix model (mma.h) reads them.
typedef unsigned long long tsr_saddr;
inline tsr_saddr tsr_saddr_of(const void* p) { return (tsr_saddr)(uintptr_t)p; }
inline void tsr_ldsm_x4(unsigned* r, tsr_saddr a) { tsr_ldmatrix_model(r, (const void*)(uintptr_t)a, false); }
inline void tsr_ldsm_x4_trans(unsigned* r, tsr_saddr a) { tsr_ldmatrix_model(r, (const void*)(uintptr_t)a, true); }
