"""A rule executor in the Catalyst mould: named batches of pure plan -> plan functions, each batch run
once or to a fixed point, every application that changed the plan traced (EXPLAIN prints the trace).

>>> from sparksub.planner import ir
>>> def drop_filter(plan, catalog):
...     return plan.transform_up(lambda n: n.child if isinstance(n, ir.Filter) and not n.conjuncts else n)
>>> ex = RuleExecutor((Batch("Cleanup", FIXED_POINT, (drop_filter,)),))
>>> plan, trace = ex.execute(ir.Filter(ir.Scan("t"), ()), catalog=None)
>>> str(plan), [(t.batch, t.rule) for t in trace]
('Scan[t]', [('Cleanup', 'drop_filter')])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sparksub.errors import SparksubError
from sparksub.planner.ir import Node

__all__ = ["Rule", "Batch", "ONCE", "FIXED_POINT", "RuleApplication", "RuleExecutor"]

Rule = Callable[[Node, object], Node]
ONCE = 1
FIXED_POINT = 100  # iteration cap, as Catalyst's spark.sql.optimizer.maxIterations


@dataclass(frozen=True)
class Batch:
    name: str
    max_iterations: int
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class RuleApplication:
    batch: str
    rule: str
    iteration: int
    before: str
    after: str

    def __str__(self) -> str:
        return f"[{self.batch}, iteration {self.iteration}] {self.rule}:\n    {self.before}\n => {self.after}"


class RuleExecutor:
    def __init__(self, batches: tuple[Batch, ...]):
        self.batches = batches

    def execute(self, plan: Node, catalog) -> tuple[Node, list[RuleApplication]]:
        trace: list[RuleApplication] = []
        for batch in self.batches:
            for iteration in range(1, batch.max_iterations + 1):
                start = plan
                for rule in batch.rules:
                    after = rule(plan, catalog)
                    if after != plan:
                        trace.append(RuleApplication(batch.name, rule.__name__, iteration, str(plan), str(after)))
                        plan = after
                if plan == start:
                    break
            else:
                if batch.max_iterations > 1:
                    raise SparksubError(f"rule batch {batch.name!r} did not reach a fixed point "
                                        f"in {batch.max_iterations} iterations")
        return plan, trace
