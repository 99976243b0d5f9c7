"""Golden fixtures per rewrite rule (as sqlglot's optimizer tests do): ``fixtures/rules/<rule>.txt``
holds cases of two lines, a subscription SELECT and the plan expected after the rule batches have run
up to and including that rule. Regenerate nothing by hand: a failing case prints both plans."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sparksub.catalyst_rules import RuleExecutor
from sparksub.catalyst_rules.rules import BATCHES, RULES
from sparksub.grammar import parse_select
from sparksub.planner.catalog import Catalog, TableDef
from sparksub.planner.logical import to_logical

FIXTURES = Path(__file__).parent / "fixtures" / "rules"


def catalog() -> Catalog:
    cat = Catalog()
    cat.add(TableDef("stock", (("symbol", "string"), ("risk", "double"), ("per", "double"),
                               ("rank", "bigint")), "symbol"))
    # the join classes (003 §4.3: R(A, B) and S(B, C)); t is a third table for the shapes that must not match
    cat.add(TableDef("r", (("rid", "string"), ("a", "double"), ("b", "bigint"), ("d", "double"),
                           ("tag", "string")), "rid"))
    cat.add(TableDef("s", (("sid", "string"), ("b", "bigint"), ("c", "double"), ("d", "double"),
                           ("tag", "string")), "sid"))
    cat.add(TableDef("t", (("tid", "string"), ("b", "bigint"), ("e", "double")), "tid"))
    return cat


def cases():
    for rule in RULES:
        path = FIXTURES / f"{rule.__name__}.txt"
        lines = [ln for ln in path.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
        assert len(lines) % 2 == 0, f"{path}: cases are pairs of lines"
        for i in range(0, len(lines), 2):
            yield pytest.param(rule, lines[i], lines[i + 1], id=f"{rule.__name__}-{i // 2}")


def test_every_rule_has_fixtures():
    assert {p.stem for p in FIXTURES.glob("*.txt")} == {r.__name__ for r in RULES}


@pytest.mark.parametrize("rule,sql,expected", list(cases()))
def test_rule_golden(rule, sql, expected):
    upto = RULES.index(rule)
    batches = tuple(dataclasses.replace(b, rules=tuple(r for r in b.rules if RULES.index(r) <= upto))
                    for b in BATCHES)
    cat = catalog()
    plan, _ = RuleExecutor(batches).execute(to_logical(parse_select(sql), cat), cat)
    assert str(plan) == expected
