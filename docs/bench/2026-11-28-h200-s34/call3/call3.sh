#!/usr/bin/env bash
# Session 34 call 3 (H200), call 2's binaries: head (main's generated C) against rs
# (TESSERA_REUSE_SYNC=1). Call 2 had the attention example +2.2% / +2.4% faster with rs and
# decode level (0.6B: -0.2% / -0.8% / +0.4% at positions 1 / 512 / 2048); more repetitions:
#  1. the wgmma GPU tests with rs, each alone (they set TESSERA_WGMMA themselves);
#  2. 0.6B at positions 512 and 2048, 8 reps;
#  3. 1.7B at positions 1 and 512, 4 reps.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] wgmma GPU tests with TESSERA_REUSE_SYNC=1, each alone"
for t in matmul_wgmma_on_gpu_matches_f64 matmul_wgmma_in_flight_on_gpu_matches_f64; do
  TESSERA_REUSE_SYNC=1 timeout 60 .gpu/bin/test-dot_kernels --ignored --exact $t > $ROOT/tests-$t.log 2>&1; echo "$t rc=$?"
  grep -E "test result" $ROOT/tests-$t.log
done
echo "=== [$(date +%T)] 0.6b decode A/B p512 p2048, 8 reps"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 8 "512 2048" head rs
echo "=== [$(date +%T)] 1.7b decode A/B p1 p512, 4 reps"
timeout 300 bash scripts/device_ab_reps.sh 1.7b 4 "1 512" head rs
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name 'tests-*.log' -exec rm -rf {} +
