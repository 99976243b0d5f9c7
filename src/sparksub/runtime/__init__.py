"""The Spark runtime: the only package besides ``jvm/`` that imports pyspark (issue 16; a test enforces it)."""
