package sparksub;

import java.util.List;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.SparkStrategy;
import scala.collection.immutable.Seq;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractFunction1;
import scala.runtime.AbstractFunction2;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions=sparksub.SparksubExtensions}: our statements in Spark's parser, our
 * group operators as named plan nodes, and the range-join rewrite in the optimizer (issue 7).
 */
public class SparksubExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  /** The Python side; one Python driver per JVM, so one bridge (the engine attached last). */
  private static volatile Bridge bridge;

  public static void attach(Bridge b) { bridge = b; }
  public static void detach() { bridge = null; }
  public static Bridge bridge() { return bridge; }
  /** Python checks this to know the extension was loaded into its session's JVM. */
  public static String version() { return "1"; }

  @Override
  public BoxedUnit apply(SparkSessionExtensions ext) {
    ext.injectParser(new AbstractFunction2<SparkSession, ParserInterface, ParserInterface>() {
      @Override public ParserInterface apply(SparkSession s, ParserInterface delegate) {
        return new StatementParser(delegate);
      }
    });
    ext.injectPlannerStrategy(new AbstractFunction1<SparkSession, SparkStrategy>() {
      @Override public SparkStrategy apply(SparkSession s) { return new SubscriptionGroup.Strategy(); }
    });
    ext.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override public Rule<LogicalPlan> apply(SparkSession s) { return new RangeJoinRule(s); }
    });
    return BoxedUnit.UNIT;
  }

  @SuppressWarnings("unchecked")
  static <T> Seq<T> seq(List<? extends T> xs) {
    return (Seq<T>) CollectionConverters.asScala(xs).toList();
  }

  /** Throws a checked exception unchecked (what Scala code does with every exception). */
  @SuppressWarnings("unchecked")
  static <E extends Throwable> E sneaky(Throwable e) throws E { throw (E) e; }

  static <T> List<T> list(scala.collection.Seq<T> xs) {
    return CollectionConverters.asJava(xs);
  }
}
