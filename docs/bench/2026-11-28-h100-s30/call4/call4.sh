#!/usr/bin/env bash
# Session 30 call 4. Binaries: .gpu/bin/tessera = c07e314 (the online softmax's tile step
# written once, `softmax_tile`: the same PTX as before in every step but the one below
# position 128, whose attend_head_cur's instructions come in another order), tessera-old =
# acbc259 (before it; PTX identical to fed130e's). 0.6B A/B at position 1, 6 reps; the GPU
# tests with c07e314 (real shape at 0.6B); the cluster probe (scripts/probe/cluster_hops.cu,
# built here with nvcc, clusters of 8 and of 4).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
echo "=== [$(date +%T)] cluster probe ($nv)"
for cl in 8 4; do
  "$nv" -O3 -DCL=$cl -gencode=arch=compute_90a,code=sm_90a -o /tmp/ch$cl scripts/probe/cluster_hops.cu > $ROOT/ch$cl-build.log 2>&1 || tail -20 $ROOT/ch$cl-build.log
  timeout 60 /tmp/ch$cl 20 2>&1 | tee $ROOT/cluster_hops-$cl.txt
done
echo "=== [$(date +%T)] 0.6b A/B p1"
timeout 200 bash scripts/device_ab_reps.sh 0.6b 6 "1" old head
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] GPU tests (real shape at 0.6B)"
timeout 200 env TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
