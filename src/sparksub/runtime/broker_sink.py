"""Delivery to a real broker (issue 17 item 3): a Spark sink, format ``sparksub-redis``, that writes the
notifications of ``Engine.publish`` (batch) and ``Engine.stream`` (Structured Streaming) to Redis Streams
from the Spark tasks -- nothing is collected on the driver, each task opens its own connection.

**Why Redis Streams rather than NATS** (both are a Debian package away: ``redis-server``, ``nats-server``):

* idempotence can be made exact in the broker.  A Redis Lua script runs atomically, so "append unless this
  message id was seen" is one server-side step (``sparksub.broker``); NATS JetStream dedupes by the
  ``Nats-Msg-Id`` header only within the stream's ``duplicate_window`` and is tuned per stream on the server,
  and plain NATS core keeps nothing, so a subscriber that was away misses messages;
* a stream per subscriber costs nothing to create (the first XADD makes it) and streams are read from any
  entry id (``XRANGE``/``XREAD``), which is the "reconnect with the last sequence number and miss nothing"
  of issue 17 item 1; a JetStream stream per subscriber is a server-side object to provision, and one
  stream with a subject per subscriber needs subject-filtered consumers;
* the client, redis-py, is synchronous and plain: usable inside a Spark task as it is, no event loop
  (nats-py is asyncio-only);
* ``maxlen`` trims a stream approximately in the same XADD, bounding memory per subscriber.

**The sink** is a Python Data Source (``pyspark.sql.datasource``): :class:`RedisNotificationSink`, with an
Arrow writer for batch writes (``df.write.format("sparksub-redis")``) and a streaming writer
(``writeStream.format("sparksub-redis")``).  Each task writes its partition's rows through
:class:`sparksub.broker.NotificationWriter`: pipelined, each row appended once per deterministic message id
(routing, ids, encoding and the dedup window: ``sparksub/broker.py``).  So delivery is at-least-once from
Spark's side -- a failed task is retried, a micro-batch whose commit did not reach the checkpoint is
replayed on restart -- and exactly-once in the streams within the dedup window.  The driver-side
``commit`` adds the tasks' counts to the hash ``<prefix>:stats`` (``appended``, ``duplicates``, ``writes``,
``last_batch_id``).

Options (``.option(...)``): ``url`` (``redis://host:port/db``; required), ``prefix`` (``sparksub``),
``dedup_window_s`` (86400), ``maxlen`` (0: no trim), ``route`` (``auto`` | ``group`` | ``subscriber``).
:func:`write_notifications` and :func:`notifications_sink` register the source, check the options and
the columns on the driver (an error before any task runs), and write.

**Spark Connect**: the Data Source API is part of Connect's client (``spark.dataSource.register`` ships
the class to the server, whose Python workers run it), so both helpers work on a Connect session as on a
classic one; the server's Python must be able to import ``sparksub`` and ``redis`` (on one machine, it
is the same Python).
"""
from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage

from sparksub.broker import BrokerError, NotificationWriter, check_columns, parse_options

try:  # pyspark >= 4.1: the streaming writer takes Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
    _STREAM_ARROW = True
except ImportError:  # pragma: no cover - pyspark 4.0: Rows
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase
    _STREAM_ARROW = False

__all__ = ["FORMAT", "RedisNotificationSink", "register", "write_notifications", "notifications_sink"]

#: the sink's format name
FORMAT = "sparksub-redis"


@dataclass
class WriteCounts(WriterCommitMessage):
    """What one task wrote: rows appended, rows skipped as already delivered."""
    appended: int = 0
    duplicates: int = 0


def _arrow_rows(batches):
    for batch in batches:
        yield from batch.to_pylist()


def _spark_rows(rows):
    for row in rows:
        yield row.asDict(recursive=True)


def _write_task(options, rows) -> WriteCounts:
    with NotificationWriter(options) as writer:
        return WriteCounts(*writer.write(rows))


def _commit(options, messages, batch_id=None) -> None:
    counts = [m for m in messages if isinstance(m, WriteCounts)]
    with NotificationWriter(options) as writer:
        writer.add_stats(sum(m.appended for m in counts), sum(m.duplicates for m in counts), batch_id)


class _BatchWriter(DataSourceArrowWriter):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return _write_task(self.options, _arrow_rows(iterator))

    def commit(self, messages):
        _commit(self.options, messages)

    def abort(self, messages):
        """Nothing to undo: what the failed job appended stays, and its retry finds it seen."""


class _StreamWriter(_StreamWriterBase):
    def __init__(self, options):
        self.options = options

    def write(self, iterator):
        return _write_task(self.options, _arrow_rows(iterator) if _STREAM_ARROW else _spark_rows(iterator))

    def commit(self, messages, batchId):
        _commit(self.options, messages, batchId)

    def abort(self, messages, batchId):
        """Nothing to undo: the micro-batch is replayed, and what this attempt appended is found seen."""


class RedisNotificationSink(DataSource):
    """Format ``sparksub-redis``: notifications to Redis Streams (module docstring)."""

    @classmethod
    def name(cls):
        return FORMAT

    def _options(self, schema, overwrite):
        if overwrite:
            raise BrokerError(f"{FORMAT} appends to Redis streams; overwrite / complete output is not supported")
        options = parse_options(self.options)
        check_columns(schema.fieldNames(), options.route)
        return options

    def writer(self, schema, overwrite):
        return _BatchWriter(self._options(schema, overwrite))

    def streamWriter(self, schema, overwrite):
        return _StreamWriter(self._options(schema, overwrite))


def register(spark) -> None:
    """Register format ``sparksub-redis`` with ``spark`` (classic or Connect; again is harmless)."""
    spark.dataSource.register(RedisNotificationSink)


def _prepare(df, url, options):
    opts = parse_options({**options, "url": url})
    check_columns(df.columns, opts.route)
    register(df.sparkSession)
    return opts


def write_notifications(df, url: str, **options) -> None:
    """Write the notifications DataFrame ``df`` (``Engine.publish``'s output) to the Redis at ``url``, from
    the tasks computing it; ``options``: ``prefix``, ``dedup_window_s``, ``maxlen``, ``route``.  Writing the
    same rows again appends nothing (within the dedup window)."""
    opts = _prepare(df, url, options)
    df.write.format(FORMAT).options(**opts.as_strings()).mode("append").save()


def notifications_sink(streaming_df, url: str, checkpoint: str, *, trigger: dict | None = None,
                       query_name: str | None = None, **options):
    """Start a streaming query writing ``streaming_df`` (``Engine.stream``'s output) to the Redis at ``url``,
    with its checkpoint at ``checkpoint``; returns the started ``StreamingQuery``.  ``trigger``: the
    ``DataStreamWriter.trigger`` keywords (e.g. ``{"availableNow": True}``); ``options`` as for
    :func:`write_notifications`.  A micro-batch replayed from the checkpoint appends nothing twice."""
    if not streaming_df.isStreaming:
        raise BrokerError("notifications_sink needs a streaming DataFrame (Engine.stream's output); "
                          "use write_notifications for a batch one")
    opts = _prepare(streaming_df, url, options)
    writer = (streaming_df.writeStream.format(FORMAT).options(**opts.as_strings())
              .option("checkpointLocation", checkpoint).outputMode("append"))
    if trigger:
        writer = writer.trigger(**trigger)
    if query_name:
        writer = writer.queryName(query_name)
    return writer.start()
