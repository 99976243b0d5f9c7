"""sparksub: large-scale stateful publish/subscribe as a SQL extension over Apache Spark."""
from sparksub.errors import (AnalysisError, BadUpdate, DuplicateSubscription, InvalidArgument, InvalidSubscription,
                             ParseError, SparksubError, UnknownSubscription, UnsupportedSubscription)

__all__ = ["Engine", "spark_session", "SparksubError", "ParseError", "AnalysisError", "UnsupportedSubscription",
           "InvalidSubscription", "DuplicateSubscription", "UnknownSubscription", "BadUpdate", "InvalidArgument"]
__version__ = "0.1.0"


def __getattr__(name):
    # The engine (and pyspark with it) is imported on first use, not with the package: a Spark task's Python
    # worker imports sparksub.runtime / sparksub.operators only, and the whole engine cost a cold worker ~2.7 s.
    if name in ("Engine", "spark_session"):
        from sparksub import engine
        return getattr(engine, name)
    raise AttributeError(f"module 'sparksub' has no attribute {name!r}")
