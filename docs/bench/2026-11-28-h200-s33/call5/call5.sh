#!/usr/bin/env bash
# Session 33 call 5 (H200): streamer.cu: the early round without warp 0 (cross 2), and the
# pipelined chain without the residual atomics (wrong on purpose); twice.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cd scripts/probe
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/streamer streamer.cu 2>&1 | tail -20 || exit 1
echo "=== run 1"; timeout 200 /tmp/streamer; echo rc=$?
echo "=== run 2"; timeout 200 /tmp/streamer; echo rc=$?
