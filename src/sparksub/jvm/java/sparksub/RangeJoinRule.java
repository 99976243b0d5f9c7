package sparksub;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.catalyst.expressions.Alias;
import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.BinaryComparison;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.GreaterThan;
import org.apache.spark.sql.catalyst.expressions.GreaterThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.LessThan;
import org.apache.spark.sql.catalyst.expressions.LessThanOrEqual;
import org.apache.spark.sql.catalyst.expressions.NamedExpression;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Join;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.plans.logical.Project;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType$;
import org.apache.spark.sql.types.FloatType$;
import org.apache.spark.sql.types.IntegralType;
import scala.Option;
import scala.collection.immutable.Nil$;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractPartialFunction;

/**
 * The plain-SQL formulation of a subscription group, recognised and handed to our operator:
 *
 * <pre>SELECT q.k.., AGG(t.y).. FROM q JOIN t ON t.x >= lo(q) AND t.x <= hi(q) GROUP BY q.k..</pre>
 *
 * with AGG in MIN, MAX, COUNT(*), COUNT(y), SUM(integral y), either bound strict, the bounds any
 * deterministic expressions over q (a band {@code q.c - q.w .. q.c + q.w} included), x numeric.
 * Spark plans it as a nested-loop join (|q| x |t| comparisons); the Python side answers every row of
 * q at once from an index on t (operators/range_join_aggregate.py). Only this shape fires: anything
 * else, or a Python side that declines (returns null) or fails, leaves Spark's plan as it was.
 * {@code spark.sparksub.rangeJoinRewrite=false} turns the rule off.
 */
public class RangeJoinRule extends Rule<LogicalPlan> {
  public static final String CONF = "spark.sparksub.rangeJoinRewrite";
  private static final AtomicLong REWRITES = new AtomicLong();
  private static volatile String lastFailure = "";

  public static long rewrites() { return REWRITES.get(); }
  public static String lastFailure() { return lastFailure; }

  public RangeJoinRule(SparkSession session) {}

  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    Bridge b = SparksubExtensions.bridge();
    if (b == null || plan.isStreaming() || !"true".equalsIgnoreCase(SQLConf.get().getConfString(CONF, "true"))) {
      return plan;
    }
    return (LogicalPlan) plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override public boolean isDefinedAt(LogicalPlan p) { return p instanceof Aggregate; }
      @Override public LogicalPlan apply(LogicalPlan p) {
        if (!(p instanceof Aggregate)) return p;
        LogicalPlan r = rewrite(b, (Aggregate) p);
        return r == null ? p : r;
      }
    });
  }

  private static LogicalPlan rewrite(Bridge b, Aggregate a) {
    LogicalPlan c = a.child();
    while (c instanceof Project && onlyAttributes(((Project) c).projectList())) c = ((Project) c).child();
    if (!(c instanceof Join)) return null;
    Join j = (Join) c;
    if (j.joinType() != Inner$.MODULE$ || j.condition().isEmpty()) return null;
    List<Expression> groups = SparksubExtensions.list(a.groupingExpressions());
    if (groups.isEmpty()) return null;
    LogicalPlan params = null, data = null;
    for (LogicalPlan[] sides : new LogicalPlan[][] {{j.left(), j.right()}, {j.right(), j.left()}}) {
      boolean all = true;
      for (Expression g : groups) all &= g instanceof Attribute && sides[0].outputSet().contains((Attribute) g);
      if (all) { params = sides[0]; data = sides[1]; break; }
    }
    if (params == null) return null;

    // The condition: exactly a lower and an upper bound on one expression x over the data side.
    List<Expression> conjuncts = new ArrayList<>();
    split(j.condition().get(), conjuncts);
    if (conjuncts.size() != 2) return null;
    Expression x = null, lo = null, hi = null;
    boolean loStrict = false, hiStrict = false;
    for (Expression e : conjuncts) {
      if (!(e instanceof BinaryComparison) || !e.deterministic()) return null;
      BinaryComparison cmp = (BinaryComparison) e;
      Expression l = cmp.left(), r = cmp.right(), ex, bound;
      boolean lower;
      if (over(l, data) && over(r, params) && !l.references().isEmpty()) { ex = l; bound = r; lower = isGreater(cmp); }
      else if (over(r, data) && over(l, params) && !r.references().isEmpty()) { ex = r; bound = l; lower = !isGreater(cmp); }
      else return null;
      if (!(cmp instanceof GreaterThan || cmp instanceof GreaterThanOrEqual || cmp instanceof LessThan
          || cmp instanceof LessThanOrEqual)) return null;
      boolean strict = cmp instanceof GreaterThan || cmp instanceof LessThan;
      if (x != null && !x.semanticEquals(ex)) return null;
      x = ex;
      if (lower) { if (lo != null) return null; lo = bound; loStrict = strict; }
      else { if (hi != null) return null; hi = bound; hiStrict = strict; }
    }
    if (lo == null || hi == null || !numeric(x.dataType())) return null;

    // The output: grouping attributes and aggregates over the data side.
    List<NamedExpression> out = SparksubExtensions.list(a.aggregateExpressions());
    List<NamedExpression> paramCols = new ArrayList<>(), dataCols = new ArrayList<>();
    for (int i = 0; i < groups.size(); i++) paramCols.add(alias(groups.get(i), "__k" + i));
    paramCols.add(alias(lo, "__lo"));
    paramCols.add(alias(hi, "__hi"));
    dataCols.add(alias(x, "__x"));
    List<String> kinds = new ArrayList<>(), types = new ArrayList<>(), texts = new ArrayList<>();
    int[] source = new int[out.size()];  // >= 0: key index; < 0: -(aggregate index) - 1
    for (int i = 0; i < out.size(); i++) {
      NamedExpression ne = out.get(i);
      Expression e = ne instanceof Alias ? ((Alias) ne).child() : (Expression) ne;
      int key = indexOf(groups, e);
      if (key >= 0) { source[i] = key; continue; }
      if (!(e instanceof AggregateExpression)) return null;
      AggregateExpression ae = (AggregateExpression) e;
      if (ae.isDistinct() || ae.filter().isDefined() || ae.mode() != Complete$.MODULE$) return null;
      AggregateFunction f = ae.aggregateFunction();
      String kind;
      Expression y = null;
      if (f instanceof Min || f instanceof Max) {
        y = f.children().head();
        kind = f instanceof Min ? "min" : "max";
        if (!numeric(y.dataType())) return null;
      } else if (f instanceof Count && f.children().size() == 1) {
        Expression arg = f.children().head();
        if (arg.foldable() && !arg.nullable()) kind = "count_star";
        else { y = arg; kind = "count"; if (!numeric(y.dataType())) return null; }
      } else if (f instanceof Sum) {
        y = f.children().head();
        kind = "sum";
        if (!(y.dataType() instanceof IntegralType)) return null;  // float sums depend on the order
      } else return null;
      if (y != null) {
        if (!over(y, data) || !y.deterministic()) return null;
        dataCols.add(alias(y, "__y" + kinds.size()));
      }
      source[i] = -kinds.size() - 1;
      kinds.add(kind);
      types.add(((Expression) ne).dataType().sql());
      texts.add(f.sql(false));
    }
    String spec = "keys=" + keyNames(groups.size()) + "\naggregates=" + String.join(",", kinds)
        + "\nresult_types=" + String.join(",", types) + "\nlo_strict=" + loStrict + "\nhi_strict=" + hiStrict
        + "\nx=" + x.sql() + "\nlo=" + lo.sql() + "\nhi=" + hi.sql() + "\nfunctions=" + String.join("\u0001", texts)
        + "\ngroup_by=" + String.join("\u0001", groups.stream().map(Expression::sql).toList());
    LogicalPlan ours;
    try {
      ours = b.rewrite(spec, new Project(SparksubExtensions.seq(paramCols), params),
          new Project(SparksubExtensions.seq(dataCols), data));
    } catch (RuntimeException err) {  // the Python side failed: Spark's plan stays, the reason is kept
      lastFailure = String.valueOf(err);
      return null;
    }
    if (ours == null) return null;
    List<Attribute> got = SparksubExtensions.list(ours.output());
    List<NamedExpression> projected = new ArrayList<>();
    for (int i = 0; i < out.size(); i++) {
      Attribute src = source[i] >= 0 ? got.get(source[i]) : got.get(groups.size() - source[i] - 1);
      NamedExpression ne = out.get(i);
      projected.add(new Alias(src, ne.name(), ne.exprId(), nil(), Option.empty(), nil()));
    }
    REWRITES.incrementAndGet();
    return new Project(SparksubExtensions.seq(projected), ours);
  }

  private static String keyNames(int n) {
    List<String> names = new ArrayList<>();
    for (int i = 0; i < n; i++) names.add("__k" + i);
    return String.join(",", names);
  }

  private static boolean isGreater(BinaryComparison c) {
    return c instanceof GreaterThan || c instanceof GreaterThanOrEqual;
  }

  private static boolean over(Expression e, LogicalPlan side) {
    return e.references().subsetOf(side.outputSet());
  }

  private static boolean numeric(DataType t) {
    return t instanceof IntegralType || t == DoubleType$.MODULE$ || t == FloatType$.MODULE$;
  }

  private static int indexOf(List<Expression> groups, Expression e) {
    for (int i = 0; i < groups.size(); i++) if (groups.get(i).semanticEquals(e)) return i;
    return -1;
  }

  private static boolean onlyAttributes(Seq<NamedExpression> xs) {
    for (NamedExpression x : SparksubExtensions.list(xs)) if (!(x instanceof Attribute)) return false;
    return true;
  }

  private static void split(Expression e, List<Expression> into) {
    if (e instanceof And) { split(((And) e).left(), into); split(((And) e).right(), into); }
    else into.add(e);
  }

  private static Alias alias(Expression e, String name) {
    return new Alias(e, name, NamedExpression$.MODULE$.newExprId(), nil(), Option.empty(), nil());
  }

  @SuppressWarnings("unchecked")
  private static <T> Seq<T> nil() { return (Seq<T>) (Object) Nil$.MODULE$; }
}
