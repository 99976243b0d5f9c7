"""Pure-Python operator cores (no pyspark import) and their thin Spark wrappers (``spark_*.py``).

One module per algorithm family. The planner knows an operator only through
:class:`sparksub.operators.base.GroupOperator`.
"""
