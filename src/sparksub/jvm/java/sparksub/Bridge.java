package sparksub;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;

/**
 * What the JVM asks of the Python engine. Implemented in Python (sparksub/jvm/bridge.py) and called
 * back through py4j, as PySpark's foreachBatch is: the algorithms and the statements' meaning stay in
 * Python; Java only recognises and forwards.
 */
public interface Bridge {
  /**
   * Runs one of our statements (CREATE SUBSCRIPTION, ...) in the engine attached to the session.
   * Returns the answer's logical plan, null for "no rows, no columns", or an error as a String
   * {@code "<kind>\t<line>\t<column>\t<message>"} (kind: ParseError or AnalysisError).
   */
  Object statement(String sql);

  /**
   * Builds our group operator for a range join recognised by {@link RangeJoinRule}: {@code params}
   * has columns __k0.., __lo, __hi; {@code data} has __x and what the shape reads (__y0.. for
   * aggregates, __y for DISTINCT, __y and __d0.. for top-k); {@code spec} is "key=value" lines (kind
   * first). Returns a plan whose output is __k0.. then __a0.. / __y / __d0.., __rn (wrapped in a
   * {@link SubscriptionGroup}), or null to keep Spark's own plan.
   */
  LogicalPlan rewrite(String spec, LogicalPlan params, LogicalPlan data);
}
