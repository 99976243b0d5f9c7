"""sparksub: large-scale stateful publish/subscribe as a SQL extension over Apache Spark."""
from sparksub.engine import Engine, spark_session
from sparksub.errors import (AnalysisError, BadUpdate, DuplicateSubscription, InvalidArgument, InvalidSubscription,
                             ParseError, SparksubError, UnknownSubscription, UnsupportedSubscription)

__all__ = ["Engine", "spark_session", "SparksubError", "ParseError", "AnalysisError", "UnsupportedSubscription",
           "InvalidSubscription", "DuplicateSubscription", "UnknownSubscription", "BadUpdate", "InvalidArgument"]
__version__ = "0.1.0"
