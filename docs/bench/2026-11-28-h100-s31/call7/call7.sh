#!/usr/bin/env bash
# Session 31 call 7 (the command as run, one line in the device call): every probe built
# with nvcc after the probes' event timing moved into common.cuh (`launch_ms`, `median`),
# then hop_parts (6 reps), cluster_hops with clusters of 4 (4 reps) and atomics run once
# to see that they still run and agree with calls 1-3 and session 30.
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc | head -1); cd scripts/probe; for p in chain hops atomics cluster_hops hop_parts stream; do "$nv" -O3 -gencode=arch=compute_90a,code=sm_90a -o /tmp/$p $p.cu > $OUT/build-$p.log 2>&1 && echo "built $p" || { echo "FAILED $p"; tail -5 $OUT/build-$p.log; }; done; "$nv" -O3 -DCL=4 -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch4 cluster_hops.cu >> $OUT/build-cluster_hops.log 2>&1 && echo built ch4; timeout 60 /tmp/hop_parts 6 2>&1 | tee $OUT/hop_parts.txt | head -12; timeout 60 /tmp/ch4 4 2>&1 | tee $OUT/cluster_hops-4.txt | tail -4; timeout 60 /tmp/atomics 2>&1 | tail -3
