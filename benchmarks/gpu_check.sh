#!/usr/bin/env bash
# The GPU checks in one go (under 8 minutes on one GPU): NCCL ledger and Work tracking, CUDA memory figures
# (allocated vs reserved, memory_summary, --snapshot, NVML per process), nsys when installed, the CUDA memleak
# test of the main suite, and attach taking a running NCCL rank's flight recorder through NCCL's dump pipe
# and torch's debug server (needs py-spy, tabulate).
# Usage: bash benchmarks/gpu_check.sh   (from the repository root, with ddpdoctor and pytest installed)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
echo "== machine"; nvidia-smi -L 2>&1 | head -4; command -v nsys || echo "nsys: not installed"
$PY - <<'PY'
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
PY
echo "== tests"
timeout 420 $PY -m pytest -q -rs tests/gpu --deselect tests/e2e/gpu/test_attach_nccl_fr.py \
  tests/e2e/test_memleak.py::test_cuda_memory_figures_on_a_gpu
echo "== attach: the flight recorder of a running NCCL job (dump pipe, debug server)"
timeout 120 $PY -m pytest -q -rs tests/e2e/gpu/test_attach_nccl_fr.py
