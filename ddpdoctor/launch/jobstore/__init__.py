"""One job, one verdict across nodes: the nodes' monitors share their ranks through a c10d TCPStore.

Where the store is: a ``torch.distributed.TCPStore`` that the ddpdoctor on the rendezvous host serves beside
torchrun's own store, at the rendezvous port + 1 (``--rdzv-endpoint HOST:PORT``, or ``--master-addr`` /
``--master-port``; SLURM and PyTorchJob environments resolve to those, launch/launchers.py), or where
``DDPDOCTOR_JOB_STORE=HOST:PORT`` says. It listens on that host's address only (the socket is bound here and
handed to TCPStore), not on every interface. torchrun's own rendezvous store is not used: the agent that hosts
it closes it as soon as its exit barrier passes, before the other nodes could read the last records.

The ddpdoctor that can bind the address serves the store and judges (on the rendezvous host, which is node 0
for a static rendezvous); every other one connects as a client. Once a second each node writes one JSON value
of its ranks' summaries (record/nodeview.py); the judge reads the others' (``nnodes`` values a second), runs the
live detectors over every rank and writes the job's verdict (one value), which the others read: store traffic
is O(nodes) a second. The judge moves each node's times to when that node published (:meth:`Exchange._shift`:
a value a second old must not make a 20 ms wait look like a second), and rebuilds and judges the job's ranks
once per new value while some node says a verdict may be near (``hot``), else every ``REDRAW_S``
(benchmarks/multinode_scale.py, docs/benchmarks.md). Every store call runs on this module's thread with a
bounded timeout, so the monitor's poll loop never waits on the network. A node that cannot reach the store
keeps today's behaviour (its own ranks, ``multinode.partial-view`` naming the nodes it could not see).

After the run: each node writes its records (bounded, compressed), the judge gathers every node's (a node
whose values stopped for ``LOST_S`` while it had not finished is *lost*: its last summary is kept), writes
``done``, and each node copies the others' records into ``RUN_DIR/nodes/<n>/`` (record/mirror.py).

The package, by question: ``address.py`` (where the store is, whose it is), ``transport.py`` (the TCPStore,
bounded calls, the link's states), ``exchange.py`` (what the nodes tell each other), ``roles.py`` (the solo,
judging and member parts the monitor calls), ``link.py`` (the thread, and :func:`link`).
"""

from __future__ import annotations

from ddpdoctor.launch.jobstore.address import (
    OWNER_KEY,
    S_OWNER,
    ForeignStore,
    StoreAddr,
    owner_mismatch,
    owner_value,
    resolve,
    store_address,
)
from ddpdoctor.launch.jobstore.exchange import (
    K_JOB,
    K_JOB_NOTE,
    K_NODE_LOST,
    LOST_S,
    PUBLISH_S,
    REDRAW_S,
    Exchange,
    node_of,
)
from ddpdoctor.launch.jobstore.link import JobLink, link
from ddpdoctor.launch.jobstore.roles import (
    ACK_WAIT_S,
    DONE_WAIT_S,
    DUMP_ACK_S,
    FINAL_WAIT_S,
    JobRole,
    JudgeRole,
    MemberRole,
    SoloRole,
)
from ddpdoctor.launch.jobstore.transport import (
    CONNECT_S,
    OP_TIMEOUT_S,
    OWNER_WAIT_S,
    STORE_ERRORS,
    LinkState,
    Transport,
)

__all__ = [
    "ACK_WAIT_S",
    "CONNECT_S",
    "DONE_WAIT_S",
    "DUMP_ACK_S",
    "FINAL_WAIT_S",
    "K_JOB",
    "K_JOB_NOTE",
    "K_NODE_LOST",
    "LOST_S",
    "OP_TIMEOUT_S",
    "OWNER_KEY",
    "OWNER_WAIT_S",
    "PUBLISH_S",
    "REDRAW_S",
    "STORE_ERRORS",
    "S_OWNER",
    "Exchange",
    "ForeignStore",
    "JobLink",
    "JobRole",
    "JudgeRole",
    "LinkState",
    "MemberRole",
    "SoloRole",
    "StoreAddr",
    "Transport",
    "link",
    "node_of",
    "owner_mismatch",
    "owner_value",
    "resolve",
    "store_address",
]
