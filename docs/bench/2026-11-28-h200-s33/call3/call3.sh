#!/usr/bin/env bash
# Session 33 call 3 (H200): streamer.cu with the norm before the products, 16 loads a thread,
# and the first round of a stage issued before its wait (`ahead`); twice.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cd scripts/probe
nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/streamer streamer.cu 2>&1 | tail -20 || exit 1
echo "=== run 1"; timeout 200 /tmp/streamer; echo rc=$?
echo "=== run 2"; timeout 200 /tmp/streamer; echo rc=$?
