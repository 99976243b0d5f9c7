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
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.NamedExpression$;
import org.apache.spark.sql.catalyst.expressions.Descending$;
import org.apache.spark.sql.catalyst.expressions.NullsFirst$;
import org.apache.spark.sql.catalyst.expressions.RowNumber;
import org.apache.spark.sql.catalyst.expressions.SortOrder;
import org.apache.spark.sql.catalyst.expressions.WindowExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateFunction;
import org.apache.spark.sql.catalyst.expressions.aggregate.Complete$;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.expressions.aggregate.Min;
import org.apache.spark.sql.catalyst.expressions.aggregate.Sum;
import org.apache.spark.sql.catalyst.plans.Inner$;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.Window;
import org.apache.spark.sql.catalyst.plans.logical.WindowGroupLimit;
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
 * deterministic expressions over q (a band {@code q.c - q.w .. q.c + q.w} included), x numeric; and its
 * DISTINCT analogue ({@code SELECT DISTINCT q.k.., t.y ...}, i.e. GROUP BY q.k.., t.y without aggregates)
 * and top-k analogue ({@code ... WHERE rn <= k} over {@code ROW_NUMBER() OVER (PARTITION BY q.k.. ORDER BY
 * t.y)} of the join's rows, k <= 100).
 * Spark plans it as a nested-loop join (|q| x |t| comparisons); the Python side answers every row of
 * q at once from an index on t (operators/range_join_aggregate.py, range_join_enumerate.py). Only these
 * shapes fire: anything else, or a Python side that declines (returns null) or fails, leaves Spark's plan
 * as it was.
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
      @Override public boolean isDefinedAt(LogicalPlan p) {
        return p instanceof Aggregate || (p instanceof Filter && ((Filter) p).child() instanceof Window);
      }
      @Override public LogicalPlan apply(LogicalPlan p) {
        LogicalPlan r = p instanceof Aggregate ? rewrite(b, (Aggregate) p)
            : p instanceof Filter ? rewriteTopK(b, (Filter) p) : null;
        return r == null ? p : r;
      }
    });
  }

  /** The join under an aggregate or a window, split into its sides and its range on x. */
  static final class RangeJoin {
    LogicalPlan params, data;
    Expression x, lo, hi;
    boolean loStrict, hiStrict;

    String spec() {
      return "lo_strict=" + loStrict + "\nhi_strict=" + hiStrict + "\nx=" + x.sql() + "\nlo=" + lo.sql()
          + "\nhi=" + hi.sql();
    }
  }

  /** {@code below} (attribute-only projections over an inner join) as a range join whose parameter side
   *  holds every one of {@code keys}; null when it is not one. */
  private static RangeJoin rangeJoin(LogicalPlan below, List<Expression> keys) {
    LogicalPlan c = below;
    while (c instanceof Project && onlyAttributes(((Project) c).projectList())) c = ((Project) c).child();
    if (!(c instanceof Join) || keys.isEmpty()) return null;
    Join j = (Join) c;
    if (j.joinType() != Inner$.MODULE$ || j.condition().isEmpty()) return null;
    RangeJoin rj = new RangeJoin();
    for (LogicalPlan[] sides : new LogicalPlan[][] {{j.left(), j.right()}, {j.right(), j.left()}}) {
      boolean all = true;
      for (Expression g : keys) all &= g instanceof Attribute && sides[0].outputSet().contains((Attribute) g);
      if (all) { rj.params = sides[0]; rj.data = sides[1]; break; }
    }
    if (rj.params == null) return null;
    // The condition: exactly a lower and an upper bound on one expression x over the data side.
    List<Expression> conjuncts = new ArrayList<>();
    split(j.condition().get(), conjuncts);
    if (conjuncts.size() != 2) return null;
    for (Expression e : conjuncts) {
      if (!(e instanceof GreaterThan || e instanceof GreaterThanOrEqual || e instanceof LessThan
          || e instanceof LessThanOrEqual) || !e.deterministic()) return null;
      BinaryComparison cmp = (BinaryComparison) e;
      Expression l = cmp.left(), r = cmp.right(), ex, bound;
      boolean lower;
      if (over(l, rj.data) && over(r, rj.params) && !l.references().isEmpty()) {
        ex = l; bound = r; lower = isGreater(cmp);
      } else if (over(r, rj.data) && over(l, rj.params) && !r.references().isEmpty()) {
        ex = r; bound = l; lower = !isGreater(cmp);
      } else return null;
      boolean strict = cmp instanceof GreaterThan || cmp instanceof LessThan;
      if (rj.x != null && !rj.x.semanticEquals(ex)) return null;
      rj.x = ex;
      if (lower) { if (rj.lo != null) return null; rj.lo = bound; rj.loStrict = strict; }
      else { if (rj.hi != null) return null; rj.hi = bound; rj.hiStrict = strict; }
    }
    if (rj.lo == null || rj.hi == null || !numeric(rj.x.dataType())) return null;
    return rj;
  }

  /** The parameter side's columns for Python: __k0.., __lo, __hi. */
  private static Project paramColumns(RangeJoin rj, List<Expression> keys) {
    List<NamedExpression> cols = new ArrayList<>();
    for (int i = 0; i < keys.size(); i++) cols.add(alias(keys.get(i), "__k" + i));
    cols.add(alias(rj.lo, "__lo"));
    cols.add(alias(rj.hi, "__hi"));
    return new Project(SparksubExtensions.seq(cols), rj.params);
  }

  /** Asks Python for the operator; null (Spark's plan stays) when it declines or fails. */
  private static LogicalPlan callPython(Bridge b, String spec, Project params, List<NamedExpression> dataCols,
                                        LogicalPlan data) {
    try {
      return b.rewrite(spec, params, new Project(SparksubExtensions.seq(dataCols), data));
    } catch (RuntimeException err) {  // the Python side failed: Spark's plan stays, the reason is kept
      lastFailure = String.valueOf(err);
      return null;
    }
  }

  /** {@code out}'s columns, each taken from column {@code source[i]} of {@code ours}, with their names and
   *  expression ids, so the plan above resolves as before. */
  private static LogicalPlan project(List<? extends NamedExpression> out, int[] source, LogicalPlan ours) {
    List<Attribute> got = SparksubExtensions.list(ours.output());
    List<NamedExpression> projected = new ArrayList<>();
    for (int i = 0; i < out.size(); i++) {
      NamedExpression ne = out.get(i);
      projected.add(new Alias(got.get(source[i]), ne.name(), ne.exprId(), nil(), Option.empty(), nil()));
    }
    REWRITES.incrementAndGet();
    return new Project(SparksubExtensions.seq(projected), ours);
  }

  /** The top-k analogue: Filter(rn <= k) over Window(ROW_NUMBER() OVER (PARTITION BY q.k.. ORDER BY y))
   *  over the range join (Spark may have put a WindowGroupLimit in between). */
  private static LogicalPlan rewriteTopK(Bridge b, Filter f) {
    Window w = (Window) f.child();
    List<NamedExpression> wexprs = SparksubExtensions.list(w.windowExpressions());
    List<SortOrder> order = SparksubExtensions.list(w.orderSpec());
    if (wexprs.size() != 1 || order.size() != 1 || !(wexprs.get(0) instanceof Alias)) return null;
    Alias rn = (Alias) wexprs.get(0);
    if (!(rn.child() instanceof WindowExpression)
        || !(((WindowExpression) rn.child()).windowFunction() instanceof RowNumber)) return null;
    int k = limit(f.condition(), rn);
    if (k < 1 || k > 100) return null;  // the operator keeps k + 1 candidates per parameter row
    LogicalPlan below = w.child();
    if (below instanceof WindowGroupLimit) below = ((WindowGroupLimit) below).child();
    List<Expression> keys = SparksubExtensions.list(w.partitionSpec());
    RangeJoin rj = rangeJoin(below, keys);
    if (rj == null) return null;
    SortOrder so = order.get(0);
    Expression y = so.child();
    if (!over(y, rj.data) || !y.deterministic() || !numeric(y.dataType())) return null;
    List<NamedExpression> dataCols = new ArrayList<>(List.of(alias(rj.x, "__x"), alias(y, "__y")));
    List<Attribute> out = SparksubExtensions.list(f.output());
    int[] source = new int[out.size()];
    int payload = 0;
    for (int i = 0; i < out.size(); i++) {
      Attribute a = out.get(i);
      int key = indexOf(keys, a);
      if (a.exprId().equals(rn.exprId())) source[i] = -1;
      else if (key >= 0) source[i] = key;
      else if (rj.data.outputSet().contains(a)) {
        dataCols.add(alias(a, "__d" + payload));
        source[i] = keys.size() + payload++;
      } else return null;  // a parameter column that is not a key differs between a key's rows
    }
    for (int i = 0; i < out.size(); i++) if (source[i] == -1) source[i] = keys.size() + payload;
    String spec = "kind=topk\nk=" + k + "\ndescending=" + (so.direction() == Descending$.MODULE$)
        + "\nnulls_first=" + (so.nullOrdering() == NullsFirst$.MODULE$) + "\npayload=" + payload
        + "\nkeys=" + keyNames(keys.size()) + "\n" + rj.spec() + "\norder_by=" + so.sql()
        + "\ngroup_by=" + String.join("\u0001", keys.stream().map(Expression::sql).toList());
    LogicalPlan ours = callPython(b, spec, paramColumns(rj, keys), dataCols, rj.data);
    return ours == null ? null : project(out, source, ours);
  }

  /** k from {@code rn <= k}, {@code rn < k}, {@code k >= rn} or {@code k > rn}; 0 when it is not that. */
  private static int limit(Expression cond, Alias rn) {
    if (!(cond instanceof BinaryComparison)) return 0;
    BinaryComparison c = (BinaryComparison) cond;
    boolean rnLeft = c.left() instanceof Attribute && ((Attribute) c.left()).exprId().equals(rn.exprId());
    boolean rnRight = c.right() instanceof Attribute && ((Attribute) c.right()).exprId().equals(rn.exprId());
    Expression lit = rnLeft ? c.right() : rnRight ? c.left() : null;
    if (!(lit instanceof Literal) || !(((Literal) lit).value() instanceof Integer)) return 0;
    int v = (Integer) ((Literal) lit).value();
    if (rnLeft && c instanceof LessThanOrEqual || rnRight && c instanceof GreaterThanOrEqual) return v;
    if (rnLeft && c instanceof LessThan || rnRight && c instanceof GreaterThan) return v - 1;
    return 0;
  }

  private static LogicalPlan rewrite(Bridge b, Aggregate a) {
    List<Expression> groups = SparksubExtensions.list(a.groupingExpressions());
    List<NamedExpression> out = SparksubExtensions.list(a.aggregateExpressions());
    RangeJoin rj = rangeJoin(a.child(), groups);
    if (rj == null) return distinct(b, a, groups, out);

    // The output: grouping attributes and aggregates over the data side.
    List<NamedExpression> dataCols = new ArrayList<>(List.of(alias(rj.x, "__x")));
    List<String> kinds = new ArrayList<>(), types = new ArrayList<>(), texts = new ArrayList<>();
    int[] source = new int[out.size()];
    List<Integer> aggregateAt = new ArrayList<>();
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
        if (!over(y, rj.data) || !y.deterministic()) return null;
        dataCols.add(alias(y, "__y" + kinds.size()));
      }
      source[i] = groups.size() + kinds.size();
      kinds.add(kind);
      types.add(((Expression) ne).dataType().sql());
      texts.add(f.sql(false));
    }
    String spec = "kind=aggregate\nkeys=" + keyNames(groups.size()) + "\naggregates=" + String.join(",", kinds)
        + "\nresult_types=" + String.join(",", types) + "\n" + rj.spec()
        + "\nfunctions=" + String.join("\u0001", texts)
        + "\ngroup_by=" + String.join("\u0001", groups.stream().map(Expression::sql).toList());
    LogicalPlan ours = callPython(b, spec, paramColumns(rj, groups), dataCols, rj.data);
    return ours == null ? null : project(out, source, ours);
  }

  /** The DISTINCT analogue: GROUP BY q.k.., y (y over the data side) with no aggregate, every output a
   *  grouping column. */
  private static LogicalPlan distinct(Bridge b, Aggregate a, List<Expression> groups, List<NamedExpression> out) {
    for (Expression g : groups) if (!(g instanceof Attribute)) return null;
    // exactly one grouping column comes from the data side: try each as y
    for (int yi = 0; yi < groups.size(); yi++) {
      List<Expression> rest = new ArrayList<>(groups);
      Expression cand = rest.remove(yi);
      RangeJoin rj = rangeJoin(a.child(), rest);
      if (rj == null || !rj.data.outputSet().contains((Attribute) cand)) continue;
      int[] source = new int[out.size()];
      for (int i = 0; i < out.size(); i++) {
        NamedExpression ne = out.get(i);
        Expression e = ne instanceof Alias ? ((Alias) ne).child() : (Expression) ne;
        if (cand.semanticEquals(e)) { source[i] = rest.size(); continue; }
        int key = indexOf(rest, e);
        if (key < 0) return null;
        source[i] = key;
      }
      String spec = "kind=distinct\nkeys=" + keyNames(rest.size()) + "\n" + rj.spec() + "\ny=" + cand.sql()
          + "\ngroup_by=" + String.join("\u0001", rest.stream().map(Expression::sql).toList());
      LogicalPlan ours = callPython(b, spec, paramColumns(rj, rest),
          List.of(alias(rj.x, "__x"), alias(cand, "__y")), rj.data);
      return ours == null ? null : project(out, source, ours);
    }
    return null;
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
