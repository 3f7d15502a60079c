// CPU versions of the prelude's asynchronous copies: done at once, so waits are no-ops.
__device__ __forceinline__ void tsr_cp_async16(const unsigned char* dst, const void* src, bool pred) {
  if (pred) std::memcpy((void*)dst, src, 16);
  else std::memset((void*)dst, 0, 16);
}
__device__ __forceinline__ void tsr_cp_commit() {}
__device__ __forceinline__ void tsr_cp_wait(unsigned) {}
