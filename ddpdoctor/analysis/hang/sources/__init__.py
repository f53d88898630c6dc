"""Readers of the hang judge's evidence: each turns one source into the same per-rank facts (facts.py).

``ledger`` reads the rank states the ledger, heartbeats and counters give; ``flight`` reads torch's
flight-recorder dumps (with what the error files and logs say of the world); ``stacks`` reads the stacks
``ddpdoctor attach`` took. The judge (judge.py) then asks the same questions of each.
"""
