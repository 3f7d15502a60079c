#!/usr/bin/env python3
"""The peers of tessera's `dot` examples on the same GPU in the same call: Triton's
tutorial matmul (03-matrix-multiplication, fused the same way: bias + SiLU, bf16 out)
and torch.matmul (cuBLAS) with the same epilogue in torch, then torch SDPA for attention
(FlashAttention-2 / cuDNN backends as torch picks them). One JSON line per measurement on
stdout; TFLOP/s from triton.testing.do_bench's median.

Usage: dot_peers.py matmul M N K | attention B H S D [--causal]
"""
import json
import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.testing import do_bench

DEV = torch.cuda.get_device_name(0)


def cfg(bm, bn, bk, g, s, w):
    return triton.Config({"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": g},
                         num_stages=s, num_warps=w)


# The tutorial's CUDA autotune configs for fp16/bf16 inputs.
@triton.autotune(
    configs=[
        cfg(128, 256, 64, 8, 3, 8), cfg(64, 256, 32, 8, 4, 4), cfg(128, 128, 32, 8, 4, 4),
        cfg(128, 64, 32, 8, 4, 4), cfg(64, 128, 32, 8, 4, 4), cfg(128, 32, 32, 8, 4, 4),
        cfg(64, 32, 32, 8, 5, 2), cfg(32, 64, 32, 8, 5, 2),
    ],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    bias = tl.load(bias_ptr + offs_cn, mask=offs_cn < N, other=0.0)
    z = accumulator + bias[None, :]
    c = (z * tl.sigmoid(z)).to(tl.bfloat16)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


def triton_matmul(a, b, bias):
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)
    matmul_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                        c.stride(0), c.stride(1))
    return c


def emit(**kw):
    kw["device"] = DEV
    print(json.dumps(kw), flush=True)


def matmul(m, n, k):
    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.float32)
    ref = F.silu(a.float() @ b.float() + bias)
    flops = 2.0 * m * n * k
    out = triton_matmul(a, b, bias)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ms = do_bench(lambda: triton_matmul(a, b, bias), return_mode="median")
    emit(kernel="triton tutorial matmul (+bias+silu)", m=m, n=n, k=k, ms=ms, tflops=flops / ms / 1e9, rel_err=err)
    ms = do_bench(lambda: torch.matmul(a, b), return_mode="median")
    emit(kernel="torch.matmul (cuBLAS, no epilogue)", m=m, n=n, k=k, ms=ms, tflops=flops / ms / 1e9)
    ms = do_bench(lambda: F.silu(torch.matmul(a, b) + bias).to(torch.bfloat16), return_mode="median")
    emit(kernel="torch.matmul + bias + silu (eager)", m=m, n=n, k=k, ms=ms, tflops=flops / ms / 1e9)


def attention(b, h, s, d, causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    flops = 4.0 * b * h * s * s * d * (0.5 if causal else 1.0)
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, backend in [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]:
        try:
            with sdpa_kernel(backend):
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                f()
                ms = do_bench(f, return_mode="median")
            emit(kernel=f"torch SDPA ({name})", b=b, h=h, s=s, d=d, causal=causal, ms=ms, tflops=flops / ms / 1e9)
        except Exception as e:  # a backend this build or GPU lacks
            emit(kernel=f"torch SDPA ({name})", b=b, h=h, s=s, d=d, causal=causal, error=str(e)[:200])


if __name__ == "__main__":
    what = sys.argv[1]
    nums = [int(x) for x in sys.argv[2:] if x.isdigit()]
    if what == "matmul":
        matmul(*nums[:3])
    else:
        attention(*nums[:4], causal="--causal" in sys.argv)
