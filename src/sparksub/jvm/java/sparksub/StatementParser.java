package sparksub;

import java.util.regex.Pattern;
import org.apache.spark.QueryContext;
import org.apache.spark.sql.AnalysisException;
import org.apache.spark.sql.catalyst.FunctionIdentifier;
import org.apache.spark.sql.catalyst.TableIdentifier;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.parser.ParameterContext;
import org.apache.spark.sql.catalyst.parser.ParseException;
import org.apache.spark.sql.catalyst.parser.ParserInterface;
import org.apache.spark.sql.catalyst.parser.SqlStatementSplitResult;
import org.apache.spark.sql.catalyst.plans.logical.LocalRelation;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.trees.Origin;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;
import scala.Option;
import scala.collection.immutable.Map;
import scala.collection.immutable.Map$;
import scala.collection.immutable.Nil$;
import scala.collection.immutable.Seq;

/**
 * Spark's parser with our statements in front: a statement that starts with one of ours goes to the
 * Python engine (the same code path as engine.sql); every other text goes, untouched, to Spark's.
 * Our statements take effect when parsed, as Spark's own DDL takes effect when spark.sql returns.
 */
public class StatementParser implements ParserInterface {
  private static final String LEAD = "(?is)^(?:\\s|--[^\\n]*(?:\\n|$)|/\\*.*?\\*/)*";
  static final Pattern OURS = Pattern.compile(LEAD
      // SHOW SUBSCRIPTIONS and SHOW SUBSCRIPTION GROUPS (and a typo after SHOW SUBSCRIPTION: our parser names it)
      + "(?:(?:CREATE|DROP|EXPLAIN)\\s+SUBSCRIPTION|SHOW\\s+SUBSCRIPTIONS?|(?:CREATE|DROP)\\s+EVENT\\s+QUERY)\\b.*");
  // A table of ours: one with a PRIMARY KEY (each upsert an update) or USING sparksub (an event stream).
  static final Pattern OUR_TABLE = Pattern.compile(LEAD
      + "CREATE\\s+TABLE\\b.*(?:\\bPRIMARY\\s+KEY\\b|\\bUSING\\s+sparksub\\b).*");

  private final ParserInterface spark;

  public StatementParser(ParserInterface delegate) { this.spark = delegate; }

  static boolean isOurs(String sql) {
    return OURS.matcher(sql).matches() || OUR_TABLE.matcher(sql).matches();
  }

  private LogicalPlan ours(String sql) throws AnalysisException {
    Bridge b = SparksubExtensions.bridge();
    if (b == null) {
      throw analysisError("sparksub: no Engine is attached to this SparkSession's JVM; "
          + "create one with sparksub.Engine(spark) (catalyst on) before running sparksub statements", 0, 0);
    }
    Object answer = b.statement(sql);
    if (answer == null) {
      return new LocalRelation(emptySeq(), emptySeq(), false, Option.empty());
    }
    if (answer instanceof LogicalPlan) return (LogicalPlan) answer;
    String[] f = answer.toString().split("\t", 4);
    int line = Integer.parseInt(f[1]), column = Integer.parseInt(f[2]);
    if (f[0].equals("ParseError")) {
      Origin at = new Origin(Option.apply(line), Option.apply(Math.max(column - 1, 0)), Option.empty(),
          Option.empty(), Option.empty(), Option.empty(), Option.empty(), Option.empty(), Option.empty(),
          Option.empty());
      throw new ParseException(Option.apply(sql), at, "_LEGACY_ERROR_TEMP_3071", message(f[3]));
    }
    throw analysisError(f[3], line, column);
  }

  /** parsePlan may throw only ParseException (a checked exception in Java): AnalysisException is
   *  its superclass, so an analysis error is rethrown unchecked, as Scala code throws it. */
  private LogicalPlan oursOrParseError(String sql) throws ParseException {
    try {
      return ours(sql);
    } catch (ParseException e) {
      throw e;
    } catch (AnalysisException e) {
      throw SparksubExtensions.<RuntimeException>sneaky(e);
    }
  }

  static AnalysisException analysisError(String msg, int line, int column) {
    return new AnalysisException(msg, line > 0 ? Option.apply(line) : Option.empty(),
        line > 0 ? Option.apply(Math.max(column - 1, 0)) : Option.empty(), Option.empty(), Option.empty(),
        message(msg), new QueryContext[0]);
  }

  @SuppressWarnings("unchecked")
  private static Map<String, String> message(String msg) {
    return ((Map<String, String>) (Object) Map$.MODULE$.empty()).updated("msg", msg);
  }

  @SuppressWarnings("unchecked")
  private static <T> Seq<T> emptySeq() { return (Seq<T>) (Object) Nil$.MODULE$; }

  @Override public LogicalPlan parsePlan(String sql) throws ParseException {
    return isOurs(sql) ? oursOrParseError(sql) : spark.parsePlan(sql);
  }
  @Override public LogicalPlan parsePlanWithParameters(String sql, ParameterContext ctx) throws ParseException {
    return isOurs(sql) ? oursOrParseError(sql) : spark.parsePlanWithParameters(sql, ctx);
  }
  @Override public Expression parseExpression(String s) throws ParseException { return spark.parseExpression(s); }
  @Override public TableIdentifier parseTableIdentifier(String s) throws ParseException {
    return spark.parseTableIdentifier(s);
  }
  @Override public FunctionIdentifier parseFunctionIdentifier(String s) throws ParseException {
    return spark.parseFunctionIdentifier(s);
  }
  @Override public Seq<String> parseMultipartIdentifier(String s) throws ParseException {
    return spark.parseMultipartIdentifier(s);
  }
  @Override public LogicalPlan parseQuery(String s) throws ParseException { return spark.parseQuery(s); }
  @Override public StructType parseRoutineParam(String s) throws ParseException { return spark.parseRoutineParam(s); }
  @Override public SqlStatementSplitResult splitStatements(String s) { return spark.splitStatements(s); }
  @Override public StructType parseTableSchema(String s) throws ParseException { return spark.parseTableSchema(s); }
  @Override public DataType parseDataType(String s) throws ParseException { return spark.parseDataType(s); }
}
