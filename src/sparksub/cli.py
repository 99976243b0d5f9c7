"""The ``sparksub`` command line (``sparksub --version`` prints the installed version).

    sparksub demo [--stocks N] [--subscriptions M] [--updates U] [--batch B]
        the stock-market example of 000 §1 end to end on embedded Spark
    sparksub run SCRIPT.sql|QUERIES.cel ... --events FILE [--table T] [--schema "col TYPE, ..."]
                 [--mode unicast|reformulated] [--batch B] [--partitions P] [--seconds-per-tick S]
        run scripts of statements (.sql) and event queries (.cel), then publish the events of a CSV or
        JSON-lines file and print the notifications, the event-query matches and a summary.  A .cel file
        holds queries (CEL or algebra), each after a line "-- query: NAME" (a file without one is one query
        named after the file); the events' stream comes from a .sql script (CREATE TABLE Stock (...)
        without a key) or --schema (the stream --table, default: the one the queries read); events may
        carry integer t0/t1 columns (else the n-th event is at tick n)
    sparksub calibrate-router [--sizes 20000x2000,...] [--events N] [--out PATH]
        fit the select-join router's cost coefficients on this machine (003 §4.6.7, Table 4.2) and store them
    sparksub serve PATH [--host H] [--port P] [--max-body-bytes N] [--max-subscriptions N] [--retention-seconds S]
        [--stream TABLE=DIR ...] [--stream-format json|csv|parquet] [--fanout-workers N]
        serve the engine directory PATH to remote clients (HTTP, WebSocket, SSE; sparksub.serve)
    sparksub token PATH --client NAME [--publisher | --admin]
        issue a token for a client of the server over PATH (its hash is kept in PATH/serve/tokens.json)
    sparksub subscribe URL "SELECT ..." --token T [--id NAME] [--count N] [--keep]
        register a subscription on a server and print its notifications as they come, one JSON per line
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]


def _engine():
    from sparksub import Engine
    return Engine()


def _version() -> str:
    """The installed distribution's version (the package's own when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("sparksub")
    except PackageNotFoundError:  # pragma: no cover - not installed
        from sparksub import __version__
        return __version__


def _error_text(err: BaseException) -> str:
    """An error as the command line prints it: its message (line, column and caret for text) and its notes
    (which statement of a script, which took effect), no traceback."""
    return "\n".join([str(err), *getattr(err, "__notes__", ())])


# ---- demo ------------------------------------------------------------------------------------------

def stock_workload(n_stocks: int, n_subs: int, n_updates: int, seed: int = 0):
    """000 Table 1: RISK and PER over [0, 10000]; subscription midpoints N(5000, 1500), lengths
    |N(1000, 1000)|; PER updates a per-stock random walk with 0.5% spikes that bounce back."""
    rng = np.random.default_rng(seed)
    risk = rng.uniform(0, 10_000, n_stocks)
    per = rng.uniform(0, 10_000, n_stocks)
    mid = rng.normal(5000, 1500, n_subs)
    length = np.abs(rng.normal(1000, 1000, n_subs))
    lo = np.clip(mid - length / 2, 0, 10_000)
    hi = np.clip(mid + length / 2, 0, 10_000)
    who = rng.integers(0, n_stocks, n_updates)
    step = rng.normal(0, 50, n_updates)
    spike = rng.random(n_updates) < 0.005
    new_per = np.empty(n_updates)
    cur = per.copy()
    bounce: dict[int, float] = {}
    for i in range(n_updates):
        s = int(who[i])
        if s in bounce:  # a spiked stock bounces back to its old PER on its next update
            cur[s] = bounce.pop(s)
        elif spike[i]:
            bounce[s] = cur[s]
            cur[s] = rng.uniform(0, 5)
        else:
            v = abs(cur[s] + step[i])  # reflect at the domain's ends (a clipped walk piles up at 0)
            cur[s] = 20_000.0 - v if v > 10_000.0 else v
        new_per[i] = cur[s]
    symbols = np.array([f"S{i:05d}" for i in range(n_stocks)], dtype=object)
    return symbols, risk, per, lo, hi, who, new_per


def demo(args) -> int:
    from tqdm import tqdm

    t0 = time.perf_counter()
    print(f"sparksub demo: {args.stocks:,} stocks, {args.subscriptions:,} range-min subscriptions, "
          f"{args.updates:,} PER updates (000 §1, Table 1 distributions)")
    symbols, risk, per, lo, hi, who, new_per = stock_workload(args.stocks, args.subscriptions, args.updates)
    engine = _engine()
    engine.sql("CREATE TABLE stock (symbol STRING PRIMARY KEY, risk DOUBLE, per DOUBLE)")
    engine.load("stock", {"symbol": symbols, "risk": risk, "per": per})
    t = time.perf_counter()
    engine.subscribe_many("SELECT MIN(per) FROM stock WHERE risk BETWEEN :lo AND :hi",
                          {"id": np.array([f"trader{i}" for i in range(args.subscriptions)], dtype=object),
                           "lo": lo, "hi": hi})
    print(f"registered {args.subscriptions:,} subscriptions in {time.perf_counter() - t:.2f} s")
    engine.sql("CREATE SUBSCRIPTION alice AS SELECT MIN(per) FROM stock WHERE risk BETWEEN 2000 AND 6000")
    print(f"alice's minimum PER over RISK in [2000, 6000]: {engine.result('alice'):.2f}")

    n_msgs = n_unicast = 0
    samples = []
    publish_time = 0.0
    bar = tqdm(total=args.updates, unit="upd", desc="publishing", file=sys.stdout)
    for start in range(0, args.updates, args.batch):
        idx = slice(start, min(start + args.batch, args.updates))
        s = who[idx]
        batch = {"symbol": symbols[s], "risk": risk[s], "per": new_per[idx]}
        t = time.perf_counter()
        messages = engine.publish("stock", batch, mode="reformulated")
        n_batch_msgs = messages.count()
        publish_time += time.perf_counter() - t
        delivered = engine.deliver(messages)  # the network + subscribers turn messages into notifications
        rows = delivered.count()
        n_msgs += n_batch_msgs
        n_unicast += rows
        if len(samples) < 5:  # one notification from each of a few different updates
            first = delivered.dropDuplicates(["seq"]).orderBy("seq").limit(5 - len(samples)).collect()
            samples += [r.asDict() for r in first]
        bar.update(idx.stop - idx.start)
    bar.close()
    stats = next(iter(engine.stats().values()))
    print("\nsample notifications (after delivery):")
    for r in samples:
        v = "empty" if r["value"] is None else f"{r['value']:.2f}"
        print(f"  {r['subscription_id']:>12}  new min PER = {v}  (update #{r['seq']})")
    print(f"alice's minimum PER now: {engine.result('alice'):.2f}\n")
    rows = [
        ("updates", f"{args.updates:,}"),
        ("ignorable / good / bad", f"{stats['ignorable']:,} / {stats['good']:,} / {stats['bad']:,}"),
        ("messages, reformulated (S-CN)", f"{n_msgs:,} ({n_msgs / args.updates:.2f} per update)"),
        ("notifications, unicast (S-UN)", f"{n_unicast:,} ({n_unicast / args.updates:.1f} per update)"),
        ("reformulated / unicast", f"{n_msgs / max(n_unicast, 1):.2%}"),
        ("updates per second (publish in Spark)", f"{args.updates / publish_time:,.0f}"),
        ("wall time", f"{time.perf_counter() - t0:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in rows))
    return 0


# ---- run -------------------------------------------------------------------------------------------

_QUERY_MARKER = re.compile(r"^[ \t]*--[ \t]*query[ \t]*:[ \t]*(?P<name>\S+)[ \t]*$", re.I | re.M)


def read_cel(path: Path) -> list[tuple[str, str, int]]:
    """The event queries of a ``.cel`` file: ``(name, text, first line)`` each.

    Each query is introduced by a line ``-- query: NAME`` and runs to the next such line; a file without
    such a line holds one query named after the file (``jumps.cel`` -> ``jumps``).  Before the first
    marker only blank lines and ``--`` comments may stand.  A query's text is CEL or the algebra (either
    parses; ``--`` comments inside are fine).
    """
    text = path.read_text()
    marks = list(_QUERY_MARKER.finditer(text))
    if not marks:
        return [(path.stem, text, 1)]
    head = text[:marks[0].start()]
    if any(ln.strip() and not ln.strip().startswith("--") for ln in head.splitlines()):
        raise ValueError(f"{path}: text before the first '-- query: NAME' line")
    out = []
    for i, m in enumerate(marks):
        body_start = m.end() + 1
        body = text[body_start:marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        out.append((m.group("name"), body, text.count("\n", 0, body_start) + 1))
    return out


def _columns_hint(events) -> str:
    """A ``--schema`` for an events file's columns (their pandas dtypes), t0/t1 left out."""
    kinds = {"i": "BIGINT", "u": "BIGINT", "f": "DOUBLE", "b": "BOOLEAN"}
    return ", ".join(f"{c} {kinds.get(events[c].dtype.kind, 'STRING')}" for c in events.columns
                     if c not in ("t0", "t1", "_op"))


def run(args) -> int:
    """``sparksub run SCRIPT... --events FILE``: run ``.sql`` scripts (statements) and ``.cel`` files (event
    queries, :func:`read_cel`) in the order given, then publish the events file in batches and print
    every notification, every event-query match, and a summary.

    Tables: the ``.sql`` scripts declare them; ``--schema "Name STRING, Price DOUBLE"`` declares the
    event stream ``--table`` (default: the one stream the ``.cel`` queries read) without a script.
    Nothing else is created implicitly: a ``.cel`` query over an undeclared stream is an error that
    suggests a ``--schema`` read off the events file's columns.
    """
    import pandas as pd

    from sparksub.errors import ParseError, SparksubError

    engine = _engine()
    if args.partitions is not None:
        engine.event_partitions = args.partitions
    if args.seconds_per_tick is not None:
        engine.event_seconds_per_tick = args.seconds_per_tick
    path = Path(args.events)
    # nullable dtypes: an empty field is a missing value (null), not NaN, which the engine refuses as data
    if path.suffix.lower() == ".csv":
        events = pd.read_csv(path, dtype_backend="numpy_nullable")
    else:
        events = pd.read_json(path, lines=True, dtype_backend="numpy_nullable")
    scripts = [Path(s) for s in args.script]
    queries = []
    try:
        for script in scripts:
            if script.suffix.lower() == ".cel":
                queries += [(script, *q) for q in read_cel(script)]
    except (OSError, ValueError) as err:
        print(err, file=sys.stderr)
        return 2
    if args.schema:
        from sparksub.grammar.events import parse_event_query
        from sparksub.operators.events.partitions import query_streams
        table = args.table
        if table is None:
            streams, published = set(), set()
            for _, _, text, _ in queries:
                try:
                    reads, publishes = query_streams(parse_event_query(text))
                except ParseError:
                    continue  # reported when it is registered
                streams |= reads
                published |= set(publishes)
            streams -= published
            if len(streams) != 1:
                print(f"--table is needed with --schema: the queries read {sorted(streams) or 'no stream'}",
                      file=sys.stderr)
                return 2
            table = streams.pop()
        try:
            engine.sql(f"CREATE TABLE {table} ({args.schema})")
        except SparksubError as err:
            print(f"--schema: {err}", file=sys.stderr)
            return 2
    for script in scripts:
        if script.suffix.lower() == ".cel":
            for _, name, text, line in [q for q in queries if q[0] == script]:
                try:
                    engine.register_event_query(name, text)
                except ParseError as err:
                    shifted = ParseError(err.message, script.read_text(), err.line + line - 1, err.column)
                    print(f"{script}: query {name}: {shifted}", file=sys.stderr)
                    return 2
                except SparksubError as err:
                    hint = ""
                    if "unknown stream" in str(err):
                        hint = (f"\n  declare it: --schema \"{_columns_hint(events)}\" (the columns of {path.name}), "
                                f"or a .sql script with CREATE TABLE")
                    print(f"{script}: query {name}: {_error_text(err)}{hint}", file=sys.stderr)
                    return 2
            continue
        try:
            answer = engine.sql(script.read_text())   # errors are positioned in the whole file
        except SparksubError as err:
            print(f"{script}: {_error_text(err)}", file=sys.stderr)
            return 2
        except OSError as err:
            print(err, file=sys.stderr)
            return 2
        except Exception as err:  # Spark's own (a statement Spark ran): its message, not a traceback
            from sparksub.runtime.spark_errors import is_spark_error
            if not is_spark_error(err):
                raise
            print(f"{script}: {type(err).__name__}: {_error_text(err)}", file=sys.stderr)
            return 2
        if isinstance(answer, str):
            print(answer)
        elif answer is not None and hasattr(answer, "toPandas"):  # SHOW SUBSCRIPTIONS [GROUPS]: a DataFrame
            print(answer.toPandas().to_string(index=False))
    tables = [t.name for t in engine.catalog]
    table = args.table or (tables[0] if len(tables) == 1 else None)
    if table is None:
        print(f"--table is needed: the scripts declare {tables}", file=sys.stderr)
        return 2
    names = engine.event_queries()
    seen = {q: 0 for q in names}
    attributes = {q: list(engine._event_queries[q].attributes) for q in names}   # a match row's own columns
    from sparksub.operators.events.partitions import match_dicts
    total = n_matches = rejected = 0
    t = time.perf_counter()
    for start in range(0, len(events), args.batch):
        chunk = events.iloc[start:start + args.batch]
        try:
            output = engine.publish(table, chunk, mode=args.mode).toArrow()
        except SparksubError as err:
            print(f"{path}: rows {start}..{start + len(chunk) - 1}: {_error_text(err)}", file=sys.stderr)
            return 2
        notes = output.to_pandas()
        total += len(notes)
        if "op" in notes.columns:      # malformed rows, set aside with their reason (DESIGN §7)
            rejected += int((notes["op"] == "rejected").sum())
        found = []
        if "query" in notes.columns:   # event-query matches are printed below, one line each
            # this batch's matches, from its own output (matches() would re-read every kept file each time)
            for i, q in enumerate(names):
                new = match_dicts(output, q, attributes[q])
                seen[q] += len(new)
                found += [(m["t1"], i, q, m) for m in new]
            notes = notes[notes["query"].isna()]
            notes = notes.dropna(axis=1, how="all") if len(notes) else notes
        if len(notes):
            # groups' outputs arrive in whichever order their tasks finish: print a batch's notifications
            # by seq, then in the order the subscriptions were registered, so a run's output is repeatable
            rank = {sid: i for i, sid in enumerate(engine._records)}
            if "subscription_id" in notes.columns:
                notes = notes.assign(_rank=notes["subscription_id"].map(lambda s: rank.get(s, len(rank))))
                notes = notes.sort_values(["seq", "_rank"], kind="stable").drop(columns="_rank")
            else:
                notes = notes.sort_values("seq", kind="stable")
            print(notes.to_string(index=False))
        n_matches += len(found)
        for _, _, q, m in sorted(found, key=lambda x: x[:2]):
            attrs = ", ".join(f"{k}={v}" for k, v in m.items() if k not in ("t0", "t1"))
            print(f"{q:>12}  match  [{m['t0']}, {m['t1']}]  {attrs}")
    elapsed = time.perf_counter() - t
    rate = len(events) / max(elapsed, 1e-9)
    rate_text = f"{rate:,.0f}" if rate >= 10 else f"{rate:.2f}"
    print(f"\n{len(events):,} events, {total:,} {'messages' if args.mode == 'reformulated' else 'notifications'}, "
          f"{rate_text} events/s")
    if names:
        print(f"{n_matches:,} event-query matches ({', '.join(f'{q} {seen[q]:,}' for q in names)}), "
              f"{rejected:,} events rejected")
    elif rejected:
        print(f"{rejected:,} rows rejected (op 'rejected' above, with the reason)")
    return 0


# ---- calibrate-router ------------------------------------------------------------------------------

def _sizes(text: str) -> list[tuple[int, int]]:
    """``"20000x2000,50000x20000"`` -> [(20000, 2000), (50000, 20000)] (tuples x queries)."""
    out = []
    for part in text.split(","):
        tuples, _, queries = part.strip().lower().partition("x")
        out.append((int(tuples), int(queries)))
    return out


def calibrate_router(args) -> int:
    # pure numpy: no Spark session is started for this command
    from sparksub.operators.joins.router import PLANS, calibrate, default_coefficients_path

    sizes = _sizes(args.sizes)
    plans = args.plans.split(",") if args.plans else list(PLANS)
    print(f"sparksub calibrate-router: {len(plans)} plans x {len(sizes)} workloads (tuples x queries: "
          f"{', '.join(f'{t:,}x{q:,}' for t, q in sizes)}) x {args.events} events; 003 Table 4.1 shapes")
    model = calibrate(sizes=sizes, events=args.events, plans=plans, seed=args.seed, repeats=args.repeats,
                      progress=lambda line: print("  " + line, flush=True))
    path = model.save(args.out or default_coefficients_path())
    print()
    print(model.table())
    print(f"\ncoefficients (µs per unit of each term) written to {path}")
    return 0


def build_jvm(args) -> int:
    # no Spark session either: javac against the installed pyspark's jars
    from sparksub.errors import CatalystUnavailable
    from sparksub.jvm import EXTENSION_CLASS, build
    try:
        jar = build.jar_path(cache=args.cache)
    except CatalystUnavailable as err:
        print(f"sparksub build-jvm: the Catalyst extension cannot be built: {err}", file=sys.stderr)
        return 1
    took = "cached" if build.last_build_seconds is None else f"built in {build.last_build_seconds:.1f} s"
    print(f"{jar} ({took})\nfor a SparkSession of your own, add:\n"
          f"  .config(\"spark.jars\", \"{jar}\")\n  .config(\"spark.sql.extensions\", \"{EXTENSION_CLASS}\")")
    return 0


# ---- serve, token, subscribe (the subscription server: sparksub.serve, sparksub.client) -------------------

def serve_command(args) -> int:
    from sparksub.serve.config import ServeConfig
    from sparksub.serve.engine_streams import StreamSource
    from sparksub.serve.server import serve
    config = ServeConfig()
    for option in ("max_body_bytes", "max_subscriptions_per_client", "retention_seconds", "queue_limit",
                   "fanout_workers"):
        value = getattr(args, option)
        if value is not None:
            setattr(config, option, value)
    if config.fanout_workers < 0:
        print(f"sparksub serve: --fanout-workers {config.fanout_workers}: give 0 (one process) or more",
              file=sys.stderr)
        return 2
    try:
        streams = [StreamSource.parse(text, args.stream_format) for text in args.stream or ()]
    except ValueError as err:
        print(f"sparksub serve: {err}", file=sys.stderr)
        return 2
    print(f"sparksub serve: {args.path} on http://{args.host}:{args.port} (tokens: sparksub token {args.path} "
          f"--client NAME)" + "".join(f"; stream {s.table} <- {s.directory} ({s.format})" for s in streams),
          flush=True)
    try:
        serve(args.path, host=args.host, port=args.port, config=config, log_level=args.log_level, streams=streams,
              stream_trigger_seconds=args.stream_trigger_seconds)
    except ValueError as err:   # a --stream naming an unknown table or a missing directory
        print(f"sparksub serve: {err}", file=sys.stderr)
        return 2
    return 0


def token_command(args) -> int:
    # no Spark session, no server packages (a new directory is made an engine directory first)
    from sparksub.errors import SparksubError
    from sparksub.serve.tokens import issue_token, token_file
    role = "admin" if args.admin else "publisher" if args.publisher else "client"
    try:
        token = issue_token(args.path, args.client, role)
    except (ValueError, OSError, SparksubError) as err:
        print(f"sparksub token: {err}", file=sys.stderr)
        return 2
    print(token)
    print(f"({role} token for client {args.client!r}; its hash is in {token_file(args.path)})", file=sys.stderr)
    return 0


def subscribe_command(args) -> int:
    import json

    from sparksub.client import ServerError, connect
    client = connect(args.url, args.token)
    try:
        stream = client.subscribe(args.sql, id=args.id, idle_timeout=args.idle_timeout)
    except ServerError as err:
        print(f"sparksub subscribe: {err}", file=sys.stderr)
        return 2
    print(f"subscribed as {stream.name}; notifications follow (Ctrl-C stops)", file=sys.stderr, flush=True)
    seen = 0
    try:
        for note in stream:
            print(json.dumps(note), flush=True)
            seen += 1
            if args.count is not None and seen >= args.count:
                break
    except KeyboardInterrupt:
        pass
    except ServerError as err:
        print(f"sparksub subscribe: {err}", file=sys.stderr)
        return 2
    finally:
        stream.close()
        if not args.keep:
            try:
                client.drop(stream.name)
            except ServerError:
                pass
        client.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparksub", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"sparksub {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="the stock-market range-min example on embedded Spark")
    d.add_argument("--stocks", type=int, default=10_000)
    d.add_argument("--subscriptions", type=int, default=100_000)
    d.add_argument("--updates", type=int, default=20_000)
    d.add_argument("--batch", type=int, default=5_000)
    d.set_defaults(fn=demo)
    r = sub.add_parser("run", help="run scripts of statements (.sql) and event queries (.cel) against an event file")
    r.add_argument("script", nargs="+", help=".sql statements or .cel event queries ('-- query: NAME' before each)")
    r.add_argument("--events", required=True, help="CSV or JSON-lines file of updates or events (t0/t1 optional)")
    r.add_argument("--table", help="the table the events update (default: the only one)")
    r.add_argument("--schema", help="declare the event stream --table: 'Name STRING, Price DOUBLE, ...'")
    r.add_argument("--partitions", type=int, help="partitions of keyed event classes (default: Spark's parallelism)")
    r.add_argument("--seconds-per-tick", type=float, help="seconds per tick for DUR units (default 1)")
    r.add_argument("--mode", choices=("unicast", "reformulated"), default="unicast")
    r.add_argument("--batch", type=int, default=10_000)
    r.set_defaults(fn=run)
    c = sub.add_parser("calibrate-router", help="fit the select-join router's cost coefficients on this machine")
    c.add_argument("--sizes", default="20000x2000,100000x10000,20000x50000,100000x100000",
                   help="comma-separated TUPLESxQUERIES workloads (default: %(default)s)")
    c.add_argument("--events", type=int, default=300, help="incoming R tuples timed per workload and A length")
    c.add_argument("--plans", help="comma-separated plan names (default: all)")
    c.add_argument("--repeats", type=int, default=3, help="timings per (tuple, plan); the minimum is kept")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", help="JSON file (default: $SPARKSUB_ROUTER_COEFFICIENTS or "
                                 "~/.cache/sparksub/router_coefficients.json)")
    c.set_defaults(fn=calibrate_router)
    b = sub.add_parser("build-jvm", help="build the Catalyst extension jar now (else it is built on first use)")
    b.add_argument("--cache", help="cache directory (default: $SPARKSUB_JVM_CACHE or ~/.cache/sparksub/jvm)")
    b.set_defaults(fn=build_jvm)
    sv = sub.add_parser("serve", help="serve an engine directory to remote subscribers (HTTP, WebSocket, SSE)")
    sv.add_argument("path", help="the engine directory (created if missing)")
    sv.add_argument("--host", default="127.0.0.1")
    sv.add_argument("--port", type=int, default=8765)
    sv.add_argument("--max-body-bytes", dest="max_body_bytes", type=int, help="largest request body accepted")
    sv.add_argument("--max-subscriptions", dest="max_subscriptions_per_client", type=int,
                    help="subscriptions and event queries one client may hold")
    sv.add_argument("--retention-seconds", dest="retention_seconds", type=float,
                    help="how long notifications are kept for reconnecting clients")
    sv.add_argument("--queue-limit", dest="queue_limit", type=int,
                    help="notifications queued per connection before it is dropped as too slow")
    sv.add_argument("--stream", action="append", metavar="TABLE=DIR",
                    help="keep a stream of TABLE running from the files added to DIR (repeatable; Structured "
                         "Streaming's file source, checkpointed in PATH); its notifications go to the subscribers")
    sv.add_argument("--stream-format", dest="stream_format", choices=("json", "csv", "parquet"), default="json",
                    help="the --stream files' format: JSON lines (default), CSV with a header, Parquet")
    sv.add_argument("--stream-trigger-seconds", dest="stream_trigger_seconds", type=float, default=1.0,
                    help="how often a --stream looks for new files (default: 1)")
    sv.add_argument("--fanout-workers", dest="fanout_workers", type=int,
                    help="serve the WebSocket/SSE streams from N processes sharing the port (SO_REUSEPORT), the "
                         "engine in this one (default 0: one process; more helps only with idle cores: "
                         "docs/benchmarks/serving.md)")
    sv.add_argument("--log-level", default="info")
    sv.set_defaults(fn=serve_command)
    tk = sub.add_parser("token", help="issue a token for a client of 'sparksub serve PATH'")
    tk.add_argument("path", help="the engine directory the server serves")
    tk.add_argument("--client", required=True, help="the client's name (letters, digits, '_', '-')")
    role = tk.add_mutually_exclusive_group()
    role.add_argument("--publisher", action="store_true", help="may also publish batches")
    role.add_argument("--admin", action="store_true", help="may also publish, declare tables and see every group")
    tk.set_defaults(fn=token_command)
    sb = sub.add_parser("subscribe", help="register a subscription on a server and print its notifications")
    sb.add_argument("url", help="the server, e.g. http://127.0.0.1:8765")
    sb.add_argument("sql", help="the subscription's SELECT")
    sb.add_argument("--token", required=True)
    sb.add_argument("--id", help="the subscription's name (default: a fresh one)")
    sb.add_argument("--count", type=int, help="stop after this many notifications")
    sb.add_argument("--idle-timeout", dest="idle_timeout", type=float, help="stop after this many quiet seconds")
    sb.add_argument("--keep", action="store_true", help="keep the subscription when the command ends")
    sb.set_defaults(fn=subscribe_command)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
