"""Scripts written with PyTorch Lightning and Hugging Face Accelerate, run for real (torchrun, 2 ranks, gloo).

Healthy ones get no error-severity finding; planted faults get the right id, culprit ranks and the user's
line (never a line inside the framework). The framework tests are skipped where the library is not
installed (``pip install -e '.[frameworks]'``); run them with that environment's python.
"""

from __future__ import annotations

import ast

import pytest

# -- healthy scripts --------------------------------------------------------------------------------------------


# -- planted faults ---------------------------------------------------------------------------------------------


# -- Lightning's own launcher: devices=N read from the script -----------------------------------------------------


@pytest.mark.parametrize(
    "src,want",
    [
        ("import lightning as L\nL.Trainer(devices=4, strategy='ddp')", 4),
        ("from lightning.pytorch import Trainer\nTrainer(accelerator='cpu', devices='3')", 3),
        ("import pytorch_lightning as pl\npl.Trainer(devices=[0, 1])", 2),
        ("Trainer(devices='auto')", None),
        ("Trainer(devices=-1)", None),
        ("Trainer(devices=n)", None),
        ("Trainer(devices=2)\nTrainer(devices=2, fast_dev_run=True)", 2),
        ("Trainer(devices=2)\nTrainer(devices=4)", None),
        ("Fabric(devices=2)", 2),
        ("model.fit(devices=3)", None),
    ],
)
def test_trainer_devices_from_the_script(src, want):
    from ddpdoctor.launch.script import trainer_devices

    assert trainer_devices(ast.parse(src)) == want


# -- leaks and stragglers through the frameworks ----------------------------------------------------------------
