#!/usr/bin/env bash
# The GPU path, once, on a CUDA host: LossScore in bf16 autocast on a ≈ 1B-parameter model, a large
# submission decoded and put on the device, and the evaluation with one worker per visible GPU.
# Prints progress, then one JSON line (benchmarks/gpu_check.py). Run from anywhere:
#     benchmarks/gpu_check.sh [--peers N] [--seq T] [--skip-workers]
# It installs nothing but the project itself (with its `cluster` extra), and only when the project is
# not importable already: the host's CUDA build of torch must be there first (README, "GPU install").
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
# GPU_CHECK_NO_INSTALL=1: the environment is prepared already (an offline host with carried wheels).
if [ -z "${GPU_CHECK_NO_INSTALL:-}" ] && ! "$py" -c "import scoring.loss_score, validator.workers, ray" 2>/dev/null; then
  "$py" -m pip install -q -e '.[cluster]'
fi
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo '{"gpu": false, "error": "torch sees no CUDA device"}'
  exit 2
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec "$py" -u -m benchmarks.gpu_check "$@"
