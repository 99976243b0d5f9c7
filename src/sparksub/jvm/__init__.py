"""The Catalyst extension (issue 7): a few Java classes that put sparksub into Spark's own parser,
planner and optimizer, built from ``java/`` by ``build.py`` and driven from Python by ``bridge.py``.

Java is glue here: the parser hands our statements to the Python engine, the plan nodes only name the
Python operators they wrap, and the optimizer rule only recognises a shape and asks Python for the
replacement.  Everything keeps working without a JDK (``Engine(catalyst=False)``, or ``'auto'``).
"""
from sparksub.jvm.build import EXTENSION_CLASS, extension_conf, jar_path

__all__ = ["EXTENSION_CLASS", "extension_conf", "jar_path"]
