#!/usr/bin/env bash
# Session 34 call 8 (H200, the machine of calls 6-7, its checkpoints still in /tmp): call 7's
# wa2 (o_proj per head's wait prefetch 2 MiB) at 1.7B, positions 512 / 2048, 4 reps. Run as
# the command line itself:
source .gpu/device-env.sh > /dev/null 2>&1; export TESSERA_CACHE_DIR=/tmp/tessera-cache; ls -d /tmp/q17 /tmp/q06 2>&1; timeout 300 bash scripts/device_ab_reps.sh 1.7b 4 "512 2048" head wa2 2>&1 | tail -4
