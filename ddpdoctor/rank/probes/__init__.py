"""The rank probes, one package per family (``check``, ``memleak``, ``profile``), each with
``install(probe, settings) -> RankProbe``; ``rank.hooks.REGISTRY`` lists them under the family key."""
