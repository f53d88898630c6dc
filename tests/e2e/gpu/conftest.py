"""GPU checks: skipped without CUDA. Run them where a GPU exists with ``bash benchmarks/gpu_check.sh``."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/helpers.py


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="no GPU: NCCL, CUDA memory, NVML and nsys paths run only where one exists")
    for item in items:
        if "tests/e2e/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)
