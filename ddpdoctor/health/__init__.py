"""``ddpdoctor doctor``'s health check: is this machine (or cluster) fit for DDP?

``env``: the environment of the launching node (versions, GPUs, interfaces, /dev/shm, limits, MASTER_ADDR).
``worker``: the rank-side program run under torchrun: every collective checked for correct results, a
bandwidth sweep; each rank writes its results as JSON into the private run directory.
``analyze``: pure, rank results -> collectives, bandwidth rows and findings.
``run``: launches torchrun with the worker, bounded, and ends every process it started.
``report``: text, JSON and JUnit.
"""
