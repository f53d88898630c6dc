"""One job across nodes: a lost node, and which node each culprit runs on. Pure.

The job store (launch/jobstore/exchange.py) writes ``node_lost`` into the monitor log when a node's ddpdoctor stopped
writing while its ranks had not finished (power loss, the OOM killer, SIGKILL of the node): :func:`detect`
names it (host, node rank, ranks, what they were last seen doing) and :func:`adjust` takes the survivors'
transport errors, and the early exits the lost ranks look like, as its victims. In a job that spans nodes
every finding with culprits says which node (host and node rank) each culprit runs on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ddpdoctor.analysis.config import Config
from ddpdoctor.analysis.findings import Finding, group_values, ranks_phrase
from ddpdoctor.analysis.ids import MULTINODE_LOST_NODE, MULTINODE_PARTIAL_VIEW
from ddpdoctor.analysis.state import all_states, describe_op, is_transport_error, loc
from ddpdoctor.record import schema
from ddpdoctor.record.reader import RunRecord

K_NODE_LOST = "node_lost"  # launch/jobstore/exchange.py writes it (monitor.jsonl)
K_JOB_NOTE = "job_note"
LOST_ID = MULTINODE_LOST_NODE
# what the lost ranks look like to the other detectors (an exit, fewer steps, a timeout, an unexplained end):
# a finding of these families that blames only the lost ranks and the ranks that lost them is the loss itself
_EXPLAINED_BY_LOSS = ("hang.", "crash.")


def nodes_of(record: RunRecord) -> dict[int, tuple[int | None, str]]:
    """rank -> (node rank, host) from the ranks' start events (GROUP_RANK, host name)."""
    out: dict[int, tuple[int | None, str]] = {}
    for r, rec in record.ranks.items():
        e = rec.event(schema.K_START) or {}
        n = e.get("node_rank")
        out[r] = (n if isinstance(n, int) else None, str(e.get("host") or "?"))
    return out


def _lost_events(record: RunRecord) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for e in record.monitor:
        if e.get("kind") == K_NODE_LOST and isinstance(e.get("node"), int):
            out.setdefault(e["node"], e)
    return out


def _last_seen(record: RunRecord, r: int, now: float, cfg: Config) -> str:
    rec = record.ranks.get(r)
    if rec is None:
        return "not seen"
    st = all_states(dataclasses.replace(record, ranks={r: rec}), now, cfg)[r]
    hb = rec.last_hb or {}
    at = f" at {st.where.file.rsplit('/', 1)[-1]}:{st.where.line}" if st.where else ""
    step = f", {st.ddp_fwd} DDP steps"
    if st.state == "waiting":
        p = st.pending or {}
        return f"waiting in {describe_op(p.get('op'), p.get('shapes'))} (#{p.get('seq')}){at}{step}"
    if st.state == "ddp-wait" or hb.get("in_backward"):
        return f"in DDP backward{at}{step}"
    if st.ended:
        return f"{st.state}{at}{step}"
    return f"computing{at}{step}"


def detect(record: RunRecord, cfg: Config) -> list[Finding]:
    """``multinode.lost-node`` for every node the job store saw disappear."""
    lost = _lost_events(record)
    if not lost:
        return []
    findings = []
    now = max((float(e.get("last_t") or 0.0) for e in lost.values()), default=0.0) or record.latest_t()
    victims = sorted(r for r, rec in record.ranks.items() if rec.error and is_transport_error(rec.error))
    for n, e in sorted(lost.items()):
        ranks = sorted(int(r) for r in e.get("ranks") or [] if isinstance(r, int))
        host = e.get("host") or "host unknown"
        seen = {r: _last_seen(record, r, now, cfg) for r in ranks}
        what = f"; last seen: {group_values(seen)}" if seen else ""
        msg = (
            f"node {n} ({host}, {ranks_phrase(ranks) if ranks else 'ranks unknown'}) was lost: "
            f"{e.get('why') or 'it stopped answering'}{what}"
        )
        if victims:
            msg += f"; {ranks_phrase(victims)} failed with transport errors because of it"
        locs = [
            l
            for r in ranks
            if (rec := record.ranks.get(r))
            and (
                l := loc(
                    r,
                    ((rec.last_hb or {}).get("pending") or {}).get("site") or (rec.last_hb or {}).get("where"),
                    "last seen",
                )
            )
        ]
        for r in victims:
            err = record.ranks[r].error or {}
            if l := loc(r, err.get("user_frame"), "victim"):
                locs.append(l)
        hint = (
            f"Look at host {host} itself: the kernel log (`dmesg`, `journalctl -k`: the OOM killer, a "
            "hardware error), the scheduler's log for the job (a preempted or failed node), its power and "
            "network. The other nodes' errors are the consequence, not the cause."
        )
        findings.append(
            Finding(
                LOST_ID,
                "error",
                msg,
                hint,
                tuple(sorted(set(ranks) | set(victims))),
                tuple(locs),
                {
                    "node": n,
                    "host": e.get("host"),
                    "lost_ranks": ranks,
                    "victims": victims,
                    "last_seen": {str(r): t for r, t in seen.items()},
                },
                culprits=tuple(ranks),
            )
        )
    return findings


def adjust(record: RunRecord, findings: list[Finding]) -> list[Finding]:
    """A lost node explains what its ranks' disappearance looks like to the other detectors; then every
    finding of a job across nodes names its culprits' nodes."""
    note = unreachable_note(record)
    if note:  # say which node could not be seen, and why
        findings = [
            dataclasses.replace(f, message=f"{f.message}; {note}") if f.id == MULTINODE_PARTIAL_VIEW else f
            for f in findings
        ]
    lost = {r for f in findings if f.id == LOST_ID for r in f.culprits}
    if lost:
        # the lost node is the cause, at any stage (rendezvous, init, training, teardown): every wait of the
        # others is its victim (a hang whose culprits are the survivors waiting for it, in init_process_group
        # or a collective, says nothing more), and so is a transport error; the lost node leads the report
        findings = [
            f
            for f in findings
            if f.id == LOST_ID
            or not (
                f.id.startswith("hang.")
                or (f.id.startswith(_EXPLAINED_BY_LOSS) and set(f.culprits) <= lost | _transport_ranks(record))
            )
        ]
        findings = [f for f in findings if f.id == LOST_ID] + [f for f in findings if f.id != LOST_ID]
    nodes = nodes_of(record)
    if len({v for v in nodes.values()}) <= 1:
        return findings
    out = []
    for f in findings:
        if not f.culprits or f.id == LOST_ID:
            out.append(f)
            continue
        by_node: dict[tuple, list[int]] = {}
        for r in f.culprits:
            by_node.setdefault(nodes.get(r, (None, "?")), []).append(r)
        where = "; ".join(
            f"{ranks_phrase(rs)} on node {n if n is not None else '?'} (host {h})"
            for (n, h), rs in sorted(by_node.items(), key=lambda kv: kv[1][0])
        )
        ev = dict(
            f.evidence,
            nodes={str(r): {"node": nodes.get(r, (None, ""))[0], "host": nodes.get(r, (None, ""))[1]} for r in f.ranks},
        )
        out.append(dataclasses.replace(f, message=f"{f.message} [{where}]", evidence=ev))
    return out


def _transport_ranks(record: RunRecord) -> set[int]:
    return {r for r, rec in record.ranks.items() if rec.error and is_transport_error(rec.error)}


def unreachable_note(record: RunRecord) -> str | None:
    """This node could not reach the job store: the store and who served it, for multinode.partial-view."""
    for e in record.monitor:
        if e.get("kind") == K_JOB_NOTE and e.get("unreachable"):
            judge = e.get("judge")
            by = f" (served by node {judge}'s ddpdoctor)" if judge is not None else ""
            if e.get("foreign"):
                return f"the job store {e.get('store')} serves another job, and this node did not join it"
            return f"the job store {e.get('store')}{by} was unreachable from this node"
    return None
