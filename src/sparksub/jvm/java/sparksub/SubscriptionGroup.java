package sparksub;

import java.util.List;
import java.util.Objects;
import org.apache.spark.rdd.RDD;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.SparkPlan;
import org.apache.spark.sql.execution.SparkStrategy;
import scala.collection.immutable.IndexedSeq;
import scala.collection.immutable.Seq;

/**
 * A named node around a subscription group's Python operator, so that Spark's own EXPLAIN shows
 * what runs there: {@code description} lists each group's class, template, size, algorithm and mode
 * (written by the Python side). Both nodes pass rows through unchanged: the operator is the child.
 */
public class SubscriptionGroup extends LogicalPlan {
  public final String description;
  public final LogicalPlan child;

  public SubscriptionGroup(String description, LogicalPlan child) {
    this.description = description;
    this.child = child;
  }

  @Override public Seq<Attribute> output() { return child.output(); }
  @Override public Seq<LogicalPlan> children() { return SparksubExtensions.seq(List.of(child)); }
  @Override public LogicalPlan withNewChildrenInternal(IndexedSeq<LogicalPlan> c) {
    return new SubscriptionGroup(description, c.apply(0));
  }
  @Override public int productArity() { return 2; }
  @Override public Object productElement(int n) { return n == 0 ? description : child; }
  @Override public boolean canEqual(Object o) { return o instanceof SubscriptionGroup; }
  @Override public boolean equals(Object o) {
    return o instanceof SubscriptionGroup && ((SubscriptionGroup) o).description.equals(description)
        && ((SubscriptionGroup) o).child.equals(child);
  }
  @Override public int hashCode() { return Objects.hash(description, child); }
  @Override public String nodeName() { return "SubscriptionGroup"; }

  /** The physical node: rows of the operator (its child), unchanged. */
  public static class Exec extends SparkPlan {
    public final String description;
    public final SparkPlan child;

    public Exec(String description, SparkPlan child) {
      this.description = description;
      this.child = child;
    }

    @Override public Seq<Attribute> output() { return child.output(); }
    @Override public Seq<SparkPlan> children() { return SparksubExtensions.seq(List.of(child)); }
    @Override public SparkPlan withNewChildrenInternal(IndexedSeq<SparkPlan> c) {
      return new Exec(description, c.apply(0));
    }
    @Override public RDD<InternalRow> doExecute() { return child.execute(); }
    @Override public int productArity() { return 2; }
    @Override public Object productElement(int n) { return n == 0 ? description : child; }
    @Override public boolean canEqual(Object o) { return o instanceof Exec; }
    @Override public boolean equals(Object o) {
      return o instanceof Exec && ((Exec) o).description.equals(description) && ((Exec) o).child.equals(child);
    }
    @Override public int hashCode() { return Objects.hash(description, child); }
    @Override public String nodeName() { return "SubscriptionGroupExec"; }
  }

  /** Plans {@link SubscriptionGroup} as {@link Exec} over the planned operator. */
  public static class Strategy extends SparkStrategy {
    @Override
    @SuppressWarnings("unchecked")
    public Seq<SparkPlan> apply(LogicalPlan plan) {
      if (plan instanceof SubscriptionGroup) {
        SubscriptionGroup g = (SubscriptionGroup) plan;
        return SparksubExtensions.seq(List.of((SparkPlan) new Exec(g.description, planLater(g.child))));
      }
      return (Seq<SparkPlan>) (Object) scala.collection.immutable.Nil$.MODULE$;
    }
  }
}
