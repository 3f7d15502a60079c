#!/usr/bin/env bash
# Session 33 call 16 (H200): after the review mends (hop_bound.cu's share_of, cta_wait, rms_inv,
# add_and_publish; red_v4 once in common.cuh; what runs unchanged), every probe built
# with nvcc 13.0; hop_bound run once more.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH
cd scripts/probe
for p in chain hops atomics cluster_hops hop_parts hop_bound latency stream; do
  nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/$p $p.cu > /tmp/$p.log 2>&1 && echo "built $p" || { echo "FAILED $p"; tail -5 /tmp/$p.log; }
done
timeout 200 /tmp/hop_bound | sed -n '/hops per layer/,$p'; echo rc=$?
