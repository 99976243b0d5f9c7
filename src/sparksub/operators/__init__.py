"""The operators: pure Python (numpy, pyarrow, sortedcontainers), never pyspark -- the Spark side is in
``sparksub.runtime`` (DESIGN §2; ``tests/test_layering.py`` enforces it).

One package per subscription family (``range_min``, ``topk``, ``distinct``, ``agg``, ``box``, ``filters``,
``joins``, ``events``; ``range_join``: the Catalyst rewrite's cores), each with its cores, group operator,
subscriber side and its binding to the one contract (``contract.py``; ``registry.py`` maps a plan node to
its family); ``shared`` holds what more than one family uses.
"""
