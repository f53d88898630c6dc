"""The hang family: how the run ended and why it stopped. Every command runs it.

Its detectors, in report order: the job never became distributed (``startup``), a rank raised
(``crash``), deadlocks and divergent collectives (``deadlock``: the ledger's case of the one policy,
``policy``, that also judges the dumps, ``dumps``, and the stacks; with ``divergence`` aligning the ranks'
sequences, ``waits`` for hangs without a divergence, ``hints`` for the advice, ``digest`` for sequences
that differed before the ledger window), collectives that completed with mismatched shapes
(``collective``), teardown noise (``teardown``), ``ddpdoctor attach``'s stacks-only view (``attach``) and
a node of a multi-node job that disappeared (``multinode``).
Pure.
"""

from __future__ import annotations

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, config: Config) -> list[Finding]:
    """Every finding of the hang family, in report order."""
    from ddpdoctor.analysis.hang import (
        attach,
        collective,
        crash,
        damage,
        deadlock,
        digest,
        multinode,
        startup,
        teardown,
    )

    return (
        damage.detect(record, config)
        + startup.detect(record, config)
        + startup.not_entered(record, config)
        + crash.detect(record, config)
        + digest.annotate(deadlock.detect(record, config), record)
        + collective.detect(record, config)
        + teardown.detect(record, config)
        + attach.detect(record, config)
        + multinode.detect(record, config)
    )  # a node the job store saw disappear
