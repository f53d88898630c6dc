"""Several ranks writing the same checkpoint file. Pure."""

from __future__ import annotations

from collections import defaultdict

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, ranks_phrase
from ddpdoctor.analysis.ids import CHECKPOINT_MULTIPLE_WRITERS
from ddpdoctor.analysis.state import loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """Findings about checkpoints: several ranks saving to the same path."""
    writers: dict[str, dict[int, dict]] = defaultdict(dict)
    for r, rec in record.ranks.items():
        for e in rec.checks:
            if e.get("kind") == schema.K_SAVE and e.get("path"):
                writers[e["path"]].setdefault(r, e)
    out = []
    for path, by_rank in sorted(writers.items()):
        if len(by_rank) < 2:
            continue
        ranks = tuple(sorted(by_rank))
        locs = tuple(l for r, e in sorted(by_rank.items()) if (l := loc(r, e.get("site"), "stores")))
        out.append(
            Finding(
                CHECKPOINT_MULTIPLE_WRITERS,
                "error",
                f"{ranks_phrase(ranks)} all write {path}: concurrent writes can leave a torn or mixed file",
                "Save from one rank only (`if dist.get_rank() == 0: torch.save(...)`), then "
                "dist.barrier() before anyone reads it.",
                ranks,
                locs,
                {"path": path},
                culprits=ranks,
            )
        )
    return out
