"""The rewrite rules, one module per rule (each with a doctest and golden fixtures under
``tests/fixtures/rules/<rule>.txt``), and the ordered batches the planner runs them in."""
from sparksub.catalyst_rules.executor import FIXED_POINT, ONCE, Batch
from sparksub.catalyst_rules.rules.close_strict_bounds import close_strict_bounds
from sparksub.catalyst_rules.rules.comparisons_to_ranges import comparisons_to_ranges
from sparksub.catalyst_rules.rules.merge_ranges import merge_ranges
from sparksub.catalyst_rules.rules.orient_comparisons import orient_comparisons
from sparksub.catalyst_rules.rules.plan_band_join import plan_band_join
from sparksub.catalyst_rules.rules.plan_box_range import plan_box_range
from sparksub.catalyst_rules.rules.plan_filter import plan_filter
from sparksub.catalyst_rules.rules.plan_range_agg import plan_range_agg
from sparksub.catalyst_rules.rules.plan_range_distinct import plan_range_distinct
from sparksub.catalyst_rules.rules.plan_range_min import plan_range_min
from sparksub.catalyst_rules.rules.plan_range_topk import plan_range_topk
from sparksub.catalyst_rules.rules.plan_select_join import plan_select_join

#: Logical normalisation, to a fixed point, then physical planning once (Catalyst's Optimizer, then
#: its SparkPlanner). A new subscription class adds its planning rule to the last batch.
BATCHES = (
    Batch("Normalize range predicates", FIXED_POINT, (orient_comparisons, comparisons_to_ranges, merge_ranges)),
    Batch("Close strict bounds", ONCE, (close_strict_bounds,)),
    Batch("Plan operators", ONCE, (plan_range_min, plan_range_topk, plan_box_range, plan_range_distinct,
                                   plan_range_agg, plan_select_join, plan_band_join, plan_filter)),
)

RULES = tuple(r for b in BATCHES for r in b.rules)
