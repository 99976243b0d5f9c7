"""The rule executor and the rewrite rules (``rules/``)."""
from sparksub.catalyst_rules.executor import RuleExecutor  # noqa: F401
