#!/usr/bin/env bash
# Session 33 call 1 (H200): hops.cu with session 32's fixes (select() zeroes the counters;
# attn_standin once), never built since; the fused-attention variants' timing, twice.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv
nvcc --version | tail -2
cd scripts/probe
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/hops hops.cu 2>&1 | tail -20 || exit 1
echo "=== run 1"; timeout 240 /tmp/hops; echo rc=$?
echo "=== run 2"; timeout 200 /tmp/hops --no-check; echo rc=$?
