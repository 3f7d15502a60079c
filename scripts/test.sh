#!/usr/bin/env bash
# The test command (README, CI). Sets up libnvrtc without a GPU, so every generated kernel
# is compiled by NVRTC even on a machine with no CUDA toolkit, then runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! python3 -c "import nvidia, os, sys; sys.exit(0 if any(os.path.exists(os.path.join(p, 'cu13', 'lib', 'libnvrtc.so.13')) for p in nvidia.__path__) else 1)" 2>/dev/null; then
  echo "installing libnvrtc (pip install nvidia-cuda-nvrtc)..." >&2
  python3 -m pip install --quiet --disable-pip-version-check nvidia-cuda-nvrtc >&2
fi
nvrtc_dir=$(python3 -c "import nvidia, os; print(next(os.path.join(p, 'cu13', 'lib') for p in nvidia.__path__ if os.path.exists(os.path.join(p, 'cu13', 'lib'))))")
export LD_LIBRARY_PATH="$nvrtc_dir:${LD_LIBRARY_PATH:-}"
cargo test --workspace "$@"
