// What f32 atomics into one small vector cost (issue 10: the down projection fused into
// gate/up, split over k, adds each CTA's partial sums for the whole hidden vector into the
// residual stream; so would o_proj split by head).
//
// Each of 128 CTAs (512 threads, one per SM as in the decode megakernel) adds a 1024-float
// partial into the same 1024 floats (Qwen3-0.6B's hidden size): 131072 adds per round,
// 128 onto each address. Timed from the first CTA's start (after a grid-wide start line) to
// the last CTA's `__threadfence()` returning after its adds (the point a release of its
// counter would be visible), median over launches:
// - `none`: the start line and the fence alone (the floor of this measurement);
// - `store`: each CTA stores its partial to its own 4 KB instead (what a split-k with a
//   second reduction hop would write);
// - `red`: one scalar `red.global.add.f32` per float (what `atomic_add` on a tile emits);
// - `red.v4`: one `red.global.add.v4.f32` per 4 floats (sm_90, PTX 8.1);
// - the same with 8192 floats (8B's hidden 4096 twice over, a pessimistic size).
//
//   nvcc -O3 -gencode=arch=compute_90,code=sm_90 -o atomics atomics.cu && ./atomics
#include "common.cuh"

constexpr int CTAS = 128, THREADS = 512, LAUNCHES = 51;

enum Mode { NONE, STORE, RED, RED_V4, NMODES };
static const char* mode_name[NMODES] = {"none", "store", "red", "red.v4"};

// start: a grid-wide start line (every CTA is resident: 128 CTAs on 132 SMs), zeroed per launch.
__global__ void __launch_bounds__(THREADS, 1)
    add_into(int mode, int n, float* dst, float* own, unsigned* start, unsigned long long* stamps) {
  __shared__ unsigned long long t0;
  if (threadIdx.x == 0) {
    atomicAdd(start, 1u);
    while (*(volatile unsigned*)start < gridDim.x) {
    }
    t0 = now();
  }
  __syncthreads();
  const float v = 1.0f + 1e-3f * (blockIdx.x % 7);
  if (mode == STORE) {
    for (int i = threadIdx.x * 4; i < n; i += THREADS * 4)
      *(float4*)(own + (size_t)blockIdx.x * n + i) = make_float4(v, v, v, v);
  } else if (mode == RED) {
    for (int i = threadIdx.x; i < n; i += THREADS) atomicAdd(dst + i, v);
  } else if (mode == RED_V4) {
    for (int i = threadIdx.x * 4; i < n; i += THREADS * 4) red_v4(dst + i, make_float4(v, v, v, v));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    stamps[2 * blockIdx.x] = t0;
    stamps[2 * blockIdx.x + 1] = now();
  }
}

int main() {
  float *dst, *own;
  unsigned* start;
  unsigned long long* stamps;
  const int max_n = 8192;
  CHECK(cudaMalloc(&dst, max_n * sizeof(float)));
  CHECK(cudaMalloc(&own, (size_t)CTAS * max_n * sizeof(float)));
  CHECK(cudaMalloc(&start, sizeof(unsigned)));
  CHECK(cudaMalloc(&stamps, 2 * CTAS * sizeof(unsigned long long)));
  std::vector<unsigned long long> h(2 * CTAS);
  printf("%d CTAs x %d threads add a partial of n floats into the same n floats; us from the first CTA's start\n",
         CTAS, THREADS);
  printf("to the last CTA's fence after its adds, median of %d launches (min, max)\n", LAUNCHES);
  for (int n : {1024, 8192}) {
    for (int m = 0; m < NMODES; ++m) {
      std::vector<double> us;
      for (int l = 0; l < LAUNCHES; ++l) {
        CHECK(cudaMemset(dst, 0, n * sizeof(float)));
        CHECK(cudaMemset(start, 0, sizeof(unsigned)));
        add_into<<<CTAS, THREADS>>>(m, n, dst, own, start, stamps);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(h.data(), stamps, h.size() * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
        unsigned long long a = ~0ull, b = 0;
        for (int c = 0; c < CTAS; ++c) a = std::min(a, h[2 * c]), b = std::max(b, h[2 * c + 1]);
        us.push_back((b - a) / 1000.0);
      }
      // The sums are right (the adds all landed): every float is the sum of the CTAs' values.
      if (m == RED || m == RED_V4) {
        std::vector<float> got(n);
        CHECK(cudaMemcpy(got.data(), dst, n * sizeof(float), cudaMemcpyDeviceToHost));
        double want = 0;
        for (int c = 0; c < CTAS; ++c) want += 1.0 + 1e-3 * (c % 7);
        for (int i = 0; i < n; ++i)
          if (std::fabs(got[i] - want) > 1e-3 * want) {
            printf("%s n=%d: float %d is %f, want %f\n", mode_name[m], n, i, got[i], want);
            return 1;
          }
      }
      std::sort(us.begin(), us.end());
      printf("n=%5d %-7s %7.2f us (%.2f, %.2f)\n", n, mode_name[m], us[us.size() / 2], us.front(), us.back());
    }
  }
  return 0;
}
