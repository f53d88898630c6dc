"""rank/compiled.py in a fresh interpreter (dynamo must not be loaded before it): nothing happens until
``torch._dynamo`` is imported; then dynamo skips ddpdoctor's frames at top level, inlines the wrappers'
files when traced code calls them, maps each collective wrapper to its original's traceable collective,
and the bookkeeping made ``eager`` runs with dynamo's frame callback off."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = r"""
import json, sys
import torch
import torch.distributed as dist
from ddpdoctor.rank import collectives, compiled, wrappers

collectives.install(dist)
compiled.install()
seen = {"before": "torch._dynamo" in sys.modules, "finder": any(getattr(f, "name", None) == "torch._dynamo" for f in sys.meta_path)}

callbacks = []
@compiled.eager
def bookkeeping():
    callbacks.append(torch._C._dynamo.eval_frame.get_eval_frame_callback())

import torch._dynamo  # the user's torch.compile imports it
from torch._dynamo import trace_rules
from torch.distributed._functional_collectives import traceable_collective_remaps as remaps

seen["finder_after"] = any(getattr(f, "name", None) == "torch._dynamo" for f in sys.meta_path)
seen["top_skipped"] = trace_rules.check(wrappers._forward_begins.__wrapped__)
seen["forward_inlined"] = not trace_rules.check(wrappers._ddp_forward(lambda self: None), is_inlined_call=True)
seen["forward_top_skipped"] = trace_rules.check(wrappers._ddp_forward(lambda self: None))
seen["remapped"] = remaps.get(dist.all_reduce) is remaps[dist.all_reduce.__ddpdoctor_wrapped__]

@torch.compile(backend="eager")
def f(x):
    torch._dynamo.graph_break()
    bookkeeping()
    return x + 1

f(torch.ones(1))
seen["callback_off"] = callbacks == [None]
print(json.dumps(seen))
"""


def test_dynamo_learns_of_ddpdoctor_at_its_import_and_not_before() -> None:
    cp = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert cp.returncode == 0, cp.stderr[-3000:]
    seen = json.loads(cp.stdout.strip().splitlines()[-1])
    assert seen == {
        "before": False,
        "finder": True,
        "finder_after": False,
        "top_skipped": True,
        "forward_inlined": True,
        "forward_top_skipped": True,
        "remapped": True,
        "callback_off": True,
    }, (seen, cp.stderr[-2000:])
