"""A real SLURM cluster for the tests in this folder (tests/slurmcluster.py): slurmctld, munged and one slurmd
per node, each node in a network namespace with its own hostname. Skipped, with the reason, where root, `ip
netns` or Debian's slurm-wlm/munge are missing (.ci/run installs them). One cluster per test: it starts in
about 2 s, and a test that kills a node leaves the next one a whole cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from slurmcluster import SlurmCluster, missing


@pytest.fixture
def slurm(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SlurmCluster]:
    """A 3-node cluster (``@pytest.mark.nodes(2)`` for fewer), stopped after the test (bounded)."""
    why = missing()
    if why:
        pytest.skip(f"a real SLURM cluster {why}")
    mark = request.node.get_closest_marker("nodes")
    cluster = SlurmCluster(tmp_path / "cluster", nnodes=mark.args[0] if mark else 3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
