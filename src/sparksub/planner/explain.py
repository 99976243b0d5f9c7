"""EXPLAIN SUBSCRIPTION: our plan (class, template, group, rule trace, algorithm, indexes, message
format, reformulated predicate, live statistics) and the Spark physical plan the group runs in.

With the Catalyst extension the physical plan is one: Spark's, in which a ``SubscriptionGroupExec`` node
names our operator (class, template, size, algorithm, mode, and the subscription explained)."""
from __future__ import annotations

from sparksub.planner.classifier import Planned

__all__ = ["explain_text", "SPARK_PLAN_TITLE"]

#: the Spark plan's heading, without and with the Catalyst extension
SPARK_PLAN_TITLE = {False: "== Spark physical plan ==",
                    True: "== Physical plan (Spark; SubscriptionGroupExec is our operator) =="}


def explain_text(target: str, planned: Planned, entry, operator_lines: dict | None, spark_plan: str,
                 catalyst: bool = False) -> str:
    """``operator_lines``: the operator section, label -> text (the family's ``explain_lines``; None: the
    range-min operator's description)."""
    lines = [f"== Subscription: {target} ==",
             f"SQL: {planned.sql}",
             f"Class: {planned.klass}",
             f"Template: {planned.template}",
             f"Group: {entry.group_id if entry else '(none yet)'}"
             f" ({len(entry.registry) if entry else 0} subscriptions)",
             "", "== Logical plan ==", str(planned.logical),
             "", "== Rule trace ==" if planned.trace else "== Rule trace == (no rule changed the plan)"]
    lines += [str(t) for t in planned.trace]
    if not catalyst:  # with it, the SubscriptionGroupExec node in Spark's plan carries this line
        lines += ["", "== Physical plan ==", str(planned.physical)]
    if operator_lines is not None:
        lines += ["", "== Operator =="]
        lines += [f"{k}: {v}" for k, v in operator_lines.items()]
    else:
        lines += ["", "== Operator ==", "algorithm: update classification + Mar/Hull/EMar (000 §2-3)",
                  "message format: <NEW_MIN, INNER_L, INNER_R, OUTER_L, OUTER_R>",
                  "reformulated predicate: (OUTER_L < x1 <= INNER_L) AND (INNER_R <= x2 < OUTER_R)"]
    lines += ["", SPARK_PLAN_TITLE[catalyst], spark_plan.rstrip()]
    return "\n".join(lines)
