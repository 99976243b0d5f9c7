"""The EVENT class (event queries, Cayuga: 004) beside the subscription contract (``operators/contract.py``):
what of it fits -- its output columns, EXPLAIN's text, its counters, the algorithm line.

An event query is not a planned subscription: it has no plan node (CEL / algebra text, ``grammar/events``,
analysed by ``grammar/event_analysis``), and registering one re-plans the *event classes* of every query
(``events/partitions.py``: queries sharing streams and a partition key run in one executor per partition,
which keeps partial matches across a re-plan), so registration, routing and the replicas' lifecycle stay in
the engine and the runtime (``Engine.register_event_query``, ``_event_part``, ``runtime/events.py``).  Pure.
"""
from __future__ import annotations

from sparksub.errors import SparksubError
from sparksub.grammar.event_ast import StreamExpr
from sparksub.operators.events import partitions as evp
from sparksub.operators.shared.row_validation import arrow_type
from sparksub.operators.shared.schemas import spark_type_name

__all__ = ["EventFamily", "EVENTS", "query_text", "summed_stats", "index_lines"]


class EventFamily:
    """The EVENT class's part of the contract (module docstring)."""

    name = "events"

    @staticmethod
    def algorithm(node=None) -> str:
        return "automata with prefix sharing, static + instance indexes, query families (004)"

    @staticmethod
    def output_layout(attributes: dict, table) -> evp.MatchLayout:
        """The columns of the matches of the queries whose output attributes are ``attributes`` (query ->
        name -> Arrow type) beside the events of ``table`` (a TableDef): ``layout.schema()`` is the output."""
        return evp.match_layout(attributes, [(c, arrow_type(t)) for c, t in table.columns])

    @staticmethod
    def explain_lines(name: str, rec, cls, executors: dict) -> list[str]:
        """EXPLAIN of event query ``name`` (``rec``: the engine's record of it) in its event class ``cls``:
        its text, output, automaton, indexes, query family and partitioning; ``executors``: the class's
        executors by replica (live statistics).  The engine adds the replicas and Spark's plan."""
        try:
            cel = rec.query.to_cel()
        except ValueError as err:
            cel = f"(none: {err})"
        streams = sorted(set(rec.raw_spellings) | set(rec.info.reads))
        lines = [f"== Event query: {name} ==", f"CEL: {cel}", f"Algebra: {rec.query.to_algebra()}", "Class: EVENT",
                 f"Reads: {', '.join(streams)}",
                 f"Publishes: {', '.join(rec.info.publishes) or '(nothing)'}",
                 f"Partition key (nfa.partition_key): {rec.info.key or '(none)'}",
                 "Output: " + ", ".join(f"{evp.output_column(a)} {spark_type_name(t).upper()}"
                                        for a, t in rec.attributes.items()) + ", t0 BIGINT, t1 BIGINT",
                 "", "== Automaton ==", rec.compiled.describe(), "", "== Indexes =="]
        lines += index_lines(rec.compiled, executors, cls)
        family = next((ex.family_of(name) for ex in executors.values() if hasattr(ex, "family_of")), None)
        if family is not None:   # nfa_families: the queries of one template run as one automaton
            lines += [f"query family (nfa_families): {family['queries']} queries of one template run as one "
                      f"automaton, constants as {family['slots']} parameter columns; this query is row "
                      f"{family['row']} with {family['parameters']}",
                      f"template: {family['template']}",
                      f"family start index: {family['start_index']}",
                      "family instance index: " + "; ".join(f"n{k} {t}" for k, t in
                                                            enumerate(family['instance_index'], 1))]
        lines += ["", "== Partitioning =="]
        if cls.key is not None:
            lines.append(f"hash-partitioned by {cls.key} into {cls.partitions} partitions: event class {cls.id} "
                         f"(event_partitions.key_partition: CRC-32 of the value; NULL -> partition 0)")
        else:
            lines.append(f"one partition: event class {cls.id} (unkeyed group; every event of "
                         f"{', '.join(cls.streams)} replicated to it)")
        comp = next(comp for comp in cls.components if name in comp)
        lines.append(f"component of queries: {', '.join(comp)}")
        others = [", ".join(x) for x in cls.components if x != comp]
        if others:
            lines.append(f"other components in the class: {'; '.join(f'[{o}]' for o in others)}")
        return lines

    @staticmethod
    def stats(state, executors: dict, events_logged: int, resets: dict) -> dict:
        """An event class's counters (``state``: the engine's ``EventClassState``): the executors' counters
        (``NFAEngine.stats()``) summed over the partitions, its queries, key, partitions and streams, the
        events logged since the bases, failures, rejected events and state resets."""
        cls = state.cls
        return {**summed_stats(executors.values()),
                "class": "EVENT", "queries": list(cls.queries), "key": cls.key,
                "partitions": cls.partitions, "streams": list(cls.streams),
                "events_logged": events_logged,
                "replica_failures": state.failures, "rejected": state.rejected,
                "state_resets": sum(resets.get(q, 0) for q in cls.queries)}


EVENTS = EventFamily()


def query_text(query: StreamExpr) -> str:
    try:
        return query.to_cel()
    except ValueError:
        return query.to_algebra()


WORK = ("events", "guards_checked", "conjuncts_evaluated", "nodes_visited", "instances_visited", "edges_evaluated",
         "instances_created", "instances_alive", "instances_expired", "instances_unmatchable", "matches")


def summed_stats(executors) -> dict:
    """The executors' counters summed (the structure counts — nodes, automata — are the same in each)."""
    out: dict = {}
    for ex in executors:
        for k, v in ex.stats().items():
            if k in ("queries", "automata", "nodes", "nodes_without_sharing", "start_groups"):
                out[k] = v
            elif k == "bytes_per_instance":
                continue
            elif isinstance(v, (int, float)):
                out[k] = out.get(k, 0) + v
    return out


def static_access(conjuncts) -> str:
    """How the static index reaches a guard (nfa._StaticIndex's rule: an ``attr = const`` conjunct, else a
    range ``attr op const``, else the guard is checked on every event)."""
    from sparksub.grammar.event_ast import Attr, Compare, Const
    from sparksub.grammar.events import parse_predicate
    flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}
    best = None
    for text in conjuncts:
        try:
            e = parse_predicate(text)
        except SparksubError:
            continue
        if not isinstance(e, Compare) or e.op not in flip:
            continue
        for a, b, op in ((e.left, e.right, e.op), (e.right, e.left, flip[e.op])):
            if isinstance(a, Attr) and isinstance(b, Const) and (op == "=" or not isinstance(b.value, bool)):
                if best is None or (op == "=" and best[1] != "="):
                    best = (a.name, op)
                break
    if best is None:
        return "checked on every event" if conjuncts else "no static conjunct: every event"
    return f"hash on {best[0]}" if best[1] == "=" else f"sorted bounds on {best[0]} {best[1]} const"


def static_tables(executor) -> str:
    """The executor's static index, per stream: its access tables and how many guards each holds."""
    describe = getattr(executor, "static_index", None)
    if describe is None:
        return "(not exposed by this executor)"
    return "; ".join(f"{stream}: {', '.join(items) or 'empty'}" for stream, items in describe().items()) or "(empty)"


def index_lines(compiled, executors: dict, cls) -> list[str]:
    """EXPLAIN's index section for one event query: per automaton node, its static guard and how the
    static index reaches it, its instance index; then the class's executors (structure and work)."""
    lines = []
    many = len(compiled.automata) > 1
    for a in compiled.automata:
        pre = f"{a.query}: " if many else ""
        nodes = {n.id: n for n in a.nodes}
        for e in a.edges:
            if e.source == "start":
                lines.append(f"{pre}start -> {e.target} on {nodes['start'].label.split(' | ')[0]}: static guard "
                             f"{' AND '.join(e.static) or 'TRUE'}; {static_access(e.static)}")
            elif e.kind == "filter":
                n = nodes[e.source]
                pure = all(seg.startswith("FILTER{") for seg in n.label.split(" | ")[1:])
                line = f"{pre}{n.id} on {n.label.split(' | ')[0]}: static guard {' AND '.join(e.static) or 'TRUE'}; "
                if n.instance_index and pure:
                    line += (f"found through the instance index on {' AND '.join(n.instance_index)} (instances "
                             f"hashed on their binding value; an event visits its own bucket, guard checked there)")
                elif n.instance_index:
                    line += (f"{static_access(e.static)}; instance index on {' AND '.join(n.instance_index)} "
                             f"(an event visits only the bucket of its value)")
                else:
                    line += f"{static_access(e.static)}; no instance index (every instance of the node is visited)"
                if n.dur_bound is not None:
                    line += f"; instances expire after DUR {n.dur_bound}"
                lines.append(line)
    if executors:
        first = next(iter(executors.values()))
        st_ = summed_stats(executors.values())
        lines.append(f"executor static index (class {cls.id}, all its queries): {static_tables(first)}")
        lines.append(f"prefix sharing (class {cls.id}): nodes {st_.get('nodes', 0)} (without sharing "
                     f"{st_.get('nodes_without_sharing', 0)}), start groups {st_.get('start_groups', 0)}")
        lines.append("work so far (NFAEngine.stats() over the partitions): "
                     + ", ".join(f"{k.replace('_', ' ')} {st_.get(k, 0)}" for k in WORK))
    return lines
