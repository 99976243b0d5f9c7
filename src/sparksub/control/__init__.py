"""The driver as the control plane: the parts of the Engine facade (``engine.py``), one module per concern --
statements, subscription groups, event queries, publishing, streaming.  Each is a mixin of ``Engine``: its methods
read and change the engine's state (the catalog, the groups, the event classes, the journal), and reach Spark only
through ``runtime/``."""
