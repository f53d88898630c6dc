"""The run-directory contract (record/schema.py): the collective vocabulary's three sets are disjoint,
every file name the docstring lists is a constant, and this ddpdoctor reads the version it writes."""

from __future__ import annotations

from ddpdoctor.record import schema


def test_the_collective_vocabulary_is_disjoint() -> None:
    assert not (schema.SHAPED & schema.P2P) and not (schema.SHAPED & schema.OTHER) and not (schema.P2P & schema.OTHER)
    assert {"all_reduce", "broadcast", "barrier", "send", "irecv"} <= schema.SHAPED | schema.P2P | schema.OTHER


def test_the_documented_files_and_versions() -> None:
    doc = schema.__doc__ or ""
    for name in (schema.MANIFEST, schema.MONITOR, schema.EVENTS, schema.HEARTBEAT, schema.LEDGER, schema.CHECKS,
                 schema.TIMELINE, schema.MEMORY, schema.FINGERPRINTS, schema.STACKS, schema.COUNTERS, schema.ERROR,
                 schema.FATAL, schema.TERMINATED):  # fmt: skip
        assert name in doc, name
    assert schema.VERSION in schema.READABLE and schema.LEDGER_RING >= 16 and schema.HB_RING >= 16
