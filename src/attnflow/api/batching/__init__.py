"""The parts of :func:`attnflow.batch`: reading the input (``inputs``), cutting it into shards
(``plan``), computing a shard where it runs (``shard``), running shards in this process or on Dask
(``engine``), and the output folder (``store``)."""
