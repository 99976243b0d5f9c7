"""Read a large group where it lives -- in a Python worker's cache -- instead of building it on the driver
(issue 16 item 3: "the driver holds the catalog and the plans; its memory does not grow with rows,
subscriptions or matches").

``result()``, ``stats()``, EXPLAIN and the deliver() side's seeding read a group through its family
(``family.result(registry, node, operator, ...)``), which calls a method or two on the group's operator.  For
a group past ``Engine.driver_operator_limit`` the operator handed to the family is a :class:`RemoteOperator`:
each method call (``operator.result(sub_id)``, ``operator.core.range_values(x1, x2)``) is one Spark task on
the group's replica -- the worker materialises it as a publish's task does (``replicas.materialize``: a cache
hit when that worker ran the last publish; a catch-up or a counted rebuild otherwise) and sends back the
call's value, pickled.  The driver then holds the answer, never the group.  The replica in the closure is a
few hundred bytes (``replicas.Replica``); arguments travel with it, so a call meant for the driver's side
of deliver() (``range_values`` over every subscription's bounds) ships its arrays once.

Only DataFrame APIs (``range`` + ``mapInArrow`` + ``collect``): Spark Connect too.  A call that raises in
the task raises here, as :class:`RemoteCallError` with the task's exception text.

A group split into parts (a range group's X zones, ``control/zones.py``) is read with :func:`call_on_each`:
one job, one task per part, each placed by claim (``runtime/placement.py``) on the worker that caches its part,
as the publishes' tasks are -- a read that ran on the other worker would rebuild the part there and evict
what that worker caches for the next publish.
"""
from __future__ import annotations

import pickle

import pyarrow as pa

from sparksub.errors import SparksubError
from sparksub.runtime.replicas import Replica, materialize, remember

__all__ = ["RemoteOperator", "RemoteCallError", "call_on_replica", "call_on_each", "call_frame"]


class RemoteCallError(SparksubError):
    """A method of a group's operator raised in the Spark task that ran it (its type and message)."""


def _called(replica: Replica, path: tuple, args: tuple, kwargs: dict, function=None) -> bytes:
    """In a task: ``materialize(replica).<path>(*args, **kwargs)`` -- or, given ``function``,
    ``function(materialize(replica).<path>, *args, **kwargs)`` -- as the pickled pair (value, error text)."""
    try:
        target = materialize(replica)
        remember(replica, replica.log_length, target)   # a read: the position does not move
        for name in path:
            target = getattr(target, name)
        value, error = (target(*args, **kwargs) if function is None else function(target, *args, **kwargs)), None
    except Exception as err:  # noqa: BLE001 - sent back and raised on the driver
        value, error = None, f"{type(err).__name__}: {err}"
    return pickle.dumps((value, error), protocol=5)


def _call_task(replica: Replica, path: tuple, args: tuple, kwargs: dict):
    def group_operator_call(batches):
        for _ in batches:   # one empty input row: the task's trigger
            pass
        yield pa.RecordBatch.from_pydict({"value": pa.array([_called(replica, path, args, kwargs)], pa.binary())})
    group_operator_call.__name__ = "group_operator_" + "_".join(path)   # what Spark's UI and EXPLAIN print
    return group_operator_call


def call_on_replica(spark, replica: Replica, path: tuple, args: tuple = (), kwargs: dict | None = None):
    """``materialize(replica).<path>(*args, **kwargs)``, computed in one Spark task; its value."""
    df = spark.range(0, 1, 1, 1).mapInArrow(_call_task(replica, tuple(path), tuple(args), dict(kwargs or {})),
                                            "value binary")
    value, error = pickle.loads(df.collect()[0][0])
    if error is not None:
        raise RemoteCallError(f"{'.'.join(path)}() on group replica {replica.replica_id!r} failed in its Spark "
                              f"task: {error}")
    return value


class RemoteOperator:
    """A group's operator as the families read it, each method call run in a Spark task on its replica (see the
    module docstring).  Attribute access only builds the path (``op.core.range_values``); the call runs it."""

    __slots__ = ("_spark", "_replica", "_path")

    def __init__(self, spark, replica: Replica, path: tuple = ()):
        self._spark, self._replica, self._path = spark, replica, tuple(path)

    def __getattr__(self, name: str) -> "RemoteOperator":
        if name.startswith("__"):   # pickling, copying, introspection: not the operator's methods
            raise AttributeError(name)
        return RemoteOperator(self._spark, self._replica, self._path + (name,))

    def __call__(self, *args, **kwargs):
        if not self._path:   # ``operator()`` (a family's lazy accessor): the operator itself, still remote
            return self
        return call_on_replica(self._spark, self._replica, self._path, args, kwargs)

    def __repr__(self) -> str:
        return f"RemoteOperator({self._replica.replica_id!r}{'.' if self._path else ''}{'.'.join(self._path)})"


def call_frame(spark, replicas: list, path: tuple, args: tuple = (), kwargs: dict | None = None,
               name: str = "group_operator_call", function=None, stage: bool = True):
    """:func:`call_on_each`'s job, ``(DataFrame, board folder)`` (``groups.placed_frame``); ``stage`` False: nothing
    written, not to run -- the plan EXPLAIN shows, a partition per replica."""
    from sparksub.runtime import groups, keepalive

    path, args, kwargs = tuple(path), tuple(args), dict(kwargs or {})
    by_id = {r.replica_id: r for r in replicas}
    trigger = {rid: groups.one_row_batch() for rid in by_id}

    def body(replica: Replica, _table):
        value = _called(replica, path, args, kwargs, function)
        yield pa.RecordBatch.from_pydict({"replica": [replica.replica_id], "value": pa.array([value], pa.binary())})

    return groups.placed_frame(spark, by_id, trigger, body, "replica string, value binary", "_".join((name, *path)),
                               keepalive.slots_of(spark) or 1, stage)


def call_on_each(spark, replicas: list, path: tuple, args: tuple = (), kwargs: dict | None = None,
                 name: str = "group_operator_call", function=None) -> list:
    """``materialize(r).<path>(*args, **kwargs)`` for every replica ``r``, computed in one Spark job with one task
    per replica (each claimed by the worker that caches it, ``groups.placed_frame``); the values in the order
    of ``replicas``.  ``function`` (a module-level function, pickled by name): ``function(materialize(r).<path>,
    *args, **kwargs)`` instead -- a read its operator has no method for (a sharded join's row partition read
    for a subscription it does not hold: ``operators/joins/shards.py``)."""
    from sparksub.runtime import groups

    path, args, kwargs = tuple(path), tuple(args), dict(kwargs or {})
    df, folder = call_frame(spark, replicas, path, args, kwargs, name, function)
    try:
        got = {rid: pickle.loads(blob) for rid, blob in df.collect()}
    finally:
        groups.remove_folder(folder)
    what = ".".join(path) if function is None else ".".join((function.__name__, *path))
    out = []
    for r in replicas:
        value, error = got[r.replica_id]
        if error is not None:
            raise RemoteCallError(f"{what}() on group replica {r.replica_id!r} failed in its Spark task: {error}")
        out.append(value)
    return out
