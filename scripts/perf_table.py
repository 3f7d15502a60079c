#!/usr/bin/env python3
"""Markdown rows for docs/PERF.md from bench_ops (ours) and bench_peers.py (Triton, torch)."""
import json, sys

ours, peers = (json.load(open(p)) for p in sys.argv[1:3])
read_bw = peers["read_gbps"]
print(f"GPU: {ours['device']}; copy bandwidth {peers['copy_gbps_read_plus_write']:.0f} GB/s (read+write), "
      f"{read_bw:.0f} GB/s read; torch {peers['torch']}, triton {peers['triton']}\n")
print("| op (size) | tessera GB/s | Triton GB/s | torch GB/s | tessera / Triton | tessera / read bandwidth |")
print("|---|---|---|---|---|---|")
for name, key, t, th in [
    ("RMSNorm 8192×8192 bf16", "rmsnorm_8192x8192_bf16_gbps", "triton_rmsnorm_gbps", "torch_rmsnorm_gbps"),
    ("softmax 8192×8192 f32", "softmax_8192x8192_f32_gbps", "triton_softmax_gbps", "torch_softmax_gbps"),
    ("GEMV 151936×1024 bf16", "gemv_151936x1024_bf16_gbps", "triton_gemv_gbps", "torch_gemv_gbps"),
]:
    o = ours[key]
    print(f"| {name} | {o:.0f} | {peers[t]:.0f} | {peers[th]:.0f} | {o / peers[t]:.2f} | {o / read_bw:.2f} |")
print()
print(f"Host cost of one launch: tessera {ours['launch_host_us']:.1f} µs, Triton {peers['triton_launch_host_us']:.1f} µs.")
print(f"NVRTC: cold compile {ours['nvrtc_cold_ms']:.0f} ms, warm (disk cache) {ours['nvrtc_warm_ms']:.1f} ms.")
