#!/usr/bin/env python3
"""The peers of tessera's shipped kernels, measured on the same GPU in the same call:
Triton (the lesson's fused RMSNorm, the tutorial's softmax, a GEMV written the same way
as ours) and torch, plus the device's copy bandwidth. Prints one JSON object.

Bandwidth counts each tensor read once plus each written once (Triton's convention),
divided by the median time of triton.testing.do_bench.
"""
import json
import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.autotune(
    configs=[triton.Config({"BLOCK_D": b}, num_warps=w) for b, w in [(256, 4), (512, 4), (1024, 8), (2048, 8)]],
    key=["D"],
)
@triton.jit
def rmsnorm_fwd(x_ptr, w_ptr, y_ptr, N, D, eps, BLOCK_D: tl.constexpr):
    # The lesson's kernel (shared/seeds/002), verbatim in substance.
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_D)
    sumsq = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for off in range(0, D, BLOCK_D):
        idx = off + cols
        mask = idx < D
        x_blk = tl.load(x_ptr + row * D + idx, mask=mask, other=0.0).to(tl.float32)
        sumsq += x_blk * x_blk
    inv_rms = tl.rsqrt(tl.sum(sumsq, axis=0) / D + eps)
    for off in range(0, D, BLOCK_D):
        idx = off + cols
        mask = idx < D
        x_blk = tl.load(x_ptr + row * D + idx, mask=mask, other=0.0).to(tl.float32)
        w_blk = tl.load(w_ptr + idx, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * D + idx, (x_blk * inv_rms * w_blk).to(tl.bfloat16), mask=mask)


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(y_ptr + row * n_cols + cols, e / tl.sum(e, axis=0), mask=mask)


@triton.jit
def _gemv(w_ptr, x_ptr, y_ptr, M, K, BM: tl.constexpr, BK: tl.constexpr):
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    rmask = rows < M
    acc = tl.zeros((BM, BK), dtype=tl.float32)
    for k0 in range(0, K, BK):
        cols = k0 + tl.arange(0, BK)
        cmask = cols < K
        x = tl.load(x_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=rmask[:, None] & cmask[None, :], other=0.0).to(tl.float32)
        acc += w * x[None, :]
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(tl.bfloat16), mask=rmask)


# The same configs as examples/bench_ops.rs, and the original six (for older tables).
GEMV_CONFIGS = [(4, 1024, 4), (8, 512, 4), (8, 1024, 8), (16, 512, 8), (16, 1024, 8), (32, 256, 8),
                (2, 1024, 4), (8, 1024, 4), (4, 1024, 2)]
gemv_kernel = triton.autotune(
    configs=[triton.Config({"BM": m, "BK": k}, num_warps=w) for m, k, w in GEMV_CONFIGS], key=["M", "K"])(_gemv)
gemv_kernel_orig = triton.autotune(
    configs=[triton.Config({"BM": m, "BK": k}, num_warps=w) for m, k, w in GEMV_CONFIGS[:6]], key=["M", "K"])(_gemv)


def gbps(nbytes, ms):
    return nbytes / (ms * 1e-3) / 1e9


def main():
    dev = "cuda"
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__}
    big = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(big)
    ms = do_bench(lambda: dst.copy_(big), return_mode="median")
    out["copy_gbps_read_plus_write"] = gbps(2 * big.numel(), ms)
    del big, dst
    # Read bandwidth, the floor of every GEMV and of decode: a read-only stream (a sum of
    # 4 GiB); the better of torch's sum and amax kernels.
    rd = torch.ones(1 << 30, dtype=torch.float32, device=dev)
    ms = min(do_bench(lambda: rd.sum(), return_mode="median"), do_bench(lambda: rd.amax(), return_mode="median"))
    out["read_gbps"] = gbps(rd.numel() * 4, ms)
    del rd

    R, D = 8192, 8192
    x = torch.randn(R, D, device=dev, dtype=torch.bfloat16)
    w = torch.randn(D, device=dev, dtype=torch.bfloat16)
    y = torch.empty_like(x)
    nbytes = 2 * R * D * 2 + D * 2
    ms = do_bench(lambda: rmsnorm_fwd[(R,)](x, w, y, R, D, 1e-6), return_mode="median")
    out["triton_rmsnorm_gbps"] = gbps(nbytes, ms)
    ms = do_bench(lambda: torch.nn.functional.rms_norm(x, (D,), w, 1e-6), return_mode="median")
    out["torch_rmsnorm_gbps"] = gbps(nbytes, ms)
    del x, y

    xs = torch.randn(R, D, device=dev, dtype=torch.float32)
    ys = torch.empty_like(xs)
    nbytes = 2 * R * D * 4
    ms = do_bench(lambda: softmax_kernel[(R,)](xs, ys, D, BLOCK=D, num_warps=16), return_mode="median")
    out["triton_softmax_gbps"] = gbps(nbytes, ms)
    ms = do_bench(lambda: torch.softmax(xs, dim=-1), return_mode="median")
    out["torch_softmax_gbps"] = gbps(nbytes, ms)
    del xs, ys

    M, K = 151936, 1024
    wm = torch.randn(M, K, device=dev, dtype=torch.bfloat16)
    xv = torch.randn(K, device=dev, dtype=torch.bfloat16)
    yv = torch.empty(M, device=dev, dtype=torch.bfloat16)
    nbytes = (M * K + K + M) * 2
    ms = do_bench(lambda: gemv_kernel[lambda meta: (triton.cdiv(M, meta["BM"]),)](wm, xv, yv, M, K), return_mode="median")
    out["triton_gemv_gbps"] = gbps(nbytes, ms)
    out["triton_gemv_best_config"] = str(gemv_kernel.best_config)
    ms = do_bench(lambda: gemv_kernel_orig[lambda meta: (triton.cdiv(M, meta["BM"]),)](wm, xv, yv, M, K), return_mode="median")
    out["triton_gemv_orig6_gbps"] = gbps(nbytes, ms)
    out["triton_gemv_orig6_best_config"] = str(gemv_kernel_orig.best_config)
    ms = do_bench(lambda: torch.mv(wm, xv), return_mode="median")
    out["torch_gemv_gbps"] = gbps(nbytes, ms)

    # Host cost of one Triton launch (the complaint we answer): tiny grid, no sync between.
    import time
    a = torch.zeros(1024, device=dev)
    softmax_kernel[(1,)](a, a, 1024, BLOCK=1024)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(2000):
        softmax_kernel[(1,)](a, a, 1024, BLOCK=1024)
    out["triton_launch_host_us"] = (time.perf_counter() - t) / 2000 * 1e6
    torch.cuda.synchronize()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
