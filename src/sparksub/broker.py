"""Notifications in Redis Streams, without Spark: the options, routing, message ids and idempotent writes the
Spark sink (``runtime/broker_sink.py``) runs inside its tasks, and a small reader for clients and tests.

Why here and not under ``runtime/``: none of this needs pyspark (the layering test allows pyspark only in
``runtime/`` and ``jvm/``), and a client that reads notifications should not have to install Spark.

**Routing** (option ``route``; one Redis stream per recipient):

* ``<prefix>:sub:<subscription_id>`` -- the unicast rows of one subscriber;
* ``<prefix>:group:<group_id>`` -- the reformulated messages of one group (its subscribers read one stream
  and match the messages to themselves, as ``Engine.deliver`` does);
* ``<prefix>:rejected`` -- rows with ``op = 'rejected'`` (a malformed update: the publisher's concern, no
  subscriber's) and ``<prefix>:errors`` -- rows with ``op = 'error'`` (a group or event replica that failed).

``route='auto'`` (the default) decides per row: a row with a ``subscription_id`` goes to its subscriber, else
one with a ``group_id`` to its group -- so reformulated output that also carries unicast rows (FILTER,
BAND_JOIN have no messages) lands where each row belongs.  ``route='subscriber'`` / ``'group'`` insist on one
kind, and a row without the column's value is an error naming the row.

**At-least-once with idempotent ids.**  A Spark task can run twice (a retried task, a speculative copy, a
micro-batch replayed after a crash between the sink's write and the checkpoint's commit), so every row gets
a deterministic id from its content: ``<seq>-<h>``, ``h`` the first 16 hex digits of BLAKE2b over the target
stream's key and the row's encoded fields (name and value of every non-null column, sorted by name).  A
notification's identity is its content -- a row equal in every column to another for the same stream and
``seq`` *is* that notification -- so the id needs no row ordinal, which a shuffle could change between two
runs of one batch (``seq`` with ``msg_no`` or with the ``item_*`` columns tells the rows of one seq apart).
Every row is written by one server-side Lua script, atomic in Redis: if ``<prefix>:seen:<id>`` exists it
does nothing, else it ``XADD``s the row and then sets that key (to the new entry's id) with a TTL of
``dedup_window_s``.  XADD first: a script that fails half-way is not rolled back by Redis, and a failing
XADD (a key of another type) must not leave a marker that would drop the row on the retry.  A replay later
than the window writes duplicates again: make the window longer than the longest outage you recover from
(default one day; one marker costs about 100 bytes).  Explicit XADD ids (``<seq>-<n>``) were the other way:
Redis rejects an id not above the stream's last one, which would dedupe for free, but several tasks append
to one stream concurrently in no particular seq order, so the ids are not monotone per stream.  One script
call appends :data:`SCRIPT_ROWS` rows (every key it touches passed in ``KEYS``), and the calls are pipelined,
:data:`PIPELINE_ROWS` rows per round trip: as fast as plain pipelined XADDs through redis-py (measured here,
the client's command packing is what costs); the pipeline loads the script itself when the server has not
got it (``EVALSHA`` -> ``NOSCRIPT`` -> ``SCRIPT LOAD``).

**Encoding**: one stream field per non-null column (a NULL is an absent field), values as text -- strings
as they are, integers in decimal, floats by ``repr`` (shortest round-trip text: ``0.1``, ``nan``,
``inf``), booleans ``true``/``false``, dates and timestamps ISO 8601, bytes base64, lists and structs JSON
-- plus :data:`ID_FIELD` with the message id, which a consumer may use to drop what it has seen.
:func:`decode_entry` turns an entry back into typed values given the output schema.
"""
from __future__ import annotations

import base64
import datetime as _dt
import decimal
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from sparksub.errors import SparksubError

__all__ = ["BrokerError", "SinkOptions", "parse_options", "check_columns", "ROUTES", "ID_FIELD", "PIPELINE_ROWS",
           "SCRIPT_ROWS", "stream_key", "encode_value", "encode_row", "message_id", "NotificationWriter",
           "read_stream", "stream_keys", "decode_entry", "redact_url"]

#: the values of option ``route``
ROUTES = ("auto", "group", "subscriber")
#: the stream field carrying a row's message id
ID_FIELD = "_msgid"
#: rows per pipelined round trip to Redis
PIPELINE_ROWS = 1000
#: the op values of rows that notify nobody, and the stream (under the prefix) each goes to
UNADDRESSED = {"rejected": "rejected", "error": "errors"}

_DEFAULT_WINDOW_S = 86_400

#: rows per script call (one EVALSHA appends up to this many rows; a pipeline carries several calls)
SCRIPT_ROWS = 100

#: Atomic "append once", for a run of rows: KEYS[2i-1] row i's seen-marker, KEYS[2i] its stream; ARGV[1] the
#: markers' TTL (s), ARGV[2] MAXLEN (0: no trim), then per row: n, then n texts (field, value, ...).  Per
#: row: nothing when its marker exists, else XADD, then SET the marker to the new entry's id.  Returns how
#: many rows were appended.
_APPEND_ONCE = """
local ttl, maxlen, a, added = ARGV[1], tonumber(ARGV[2]), 3, 0
for i = 1, #KEYS, 2 do
  local n = tonumber(ARGV[a])
  if redis.call('EXISTS', KEYS[i]) == 0 then
    local id
    if maxlen > 0 then
      id = redis.call('XADD', KEYS[i + 1], 'MAXLEN', '~', maxlen, '*', unpack(ARGV, a + 1, a + n))
    else
      id = redis.call('XADD', KEYS[i + 1], '*', unpack(ARGV, a + 1, a + n))
    end
    redis.call('SET', KEYS[i], id, 'EX', ttl)
    added = added + 1
  end
  a = a + n + 1
end
return added
"""


class BrokerError(SparksubError, ValueError):
    """A bad sink option, a row the chosen route cannot address, or a Redis server that cannot be reached or
    refuses a write; the message names the option, the row (by ``seq``) or the server (password removed)."""


def redact_url(url: str) -> str:
    """``url`` without its password (for messages and logs)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, checked: ``url`` (``redis://[:password@]host:port/db``, also ``rediss://`` and
    ``unix://``), ``prefix`` of every key, ``dedup_window_s`` (TTL of the seen-markers), ``maxlen``
    (approximate trim of each stream; 0: none), ``route`` (one of :data:`ROUTES`)."""
    url: str
    prefix: str = "sparksub"
    dedup_window_s: int = _DEFAULT_WINDOW_S
    maxlen: int = 0
    route: str = "auto"

    def as_strings(self) -> dict[str, str]:
        """The options as a Spark writer takes them."""
        return {"url": self.url, "prefix": self.prefix, "dedup_window_s": str(self.dedup_window_s),
                "maxlen": str(self.maxlen), "route": self.route}


def _positive_int(name: str, value, minimum: int) -> int:
    try:
        n = int(str(value).strip())
    except ValueError:
        raise BrokerError(f"sink option {name}={value!r} is not an integer") from None
    if n < minimum:
        raise BrokerError(f"sink option {name}={n} must be >= {minimum}")
    return n


def parse_options(options: Mapping[str, object]) -> SinkOptions:
    """:class:`SinkOptions` from a mapping of option names (any case, as Spark passes them) to values (strings
    from Spark, or Python values); raises :class:`BrokerError` naming a missing, unknown or bad option."""
    given = {str(k).lower(): v for k, v in options.items() if k is not None}
    known = {"url", "prefix", "dedup_window_s", "maxlen", "route"}
    # Spark adds options of its own to a streaming writer's (checkpointLocation, path): not ours to check
    unknown = sorted(k for k in given if k not in known and k not in ("checkpointlocation", "path"))
    if unknown:
        raise BrokerError(f"unknown sink option(s) {', '.join(unknown)}; expected {', '.join(sorted(known))}")
    url = given.get("url")
    if not url:
        raise BrokerError("sink option url is required (redis://host:port/db)")
    url = str(url)
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise BrokerError(f"sink option url={redact_url(url)!r}: expected redis://, rediss:// or unix://")
    prefix = str(given.get("prefix", "sparksub"))
    if not prefix or any(c.isspace() for c in prefix):
        raise BrokerError(f"sink option prefix={prefix!r} must be non-empty and without spaces")
    route = str(given.get("route", "auto")).lower()
    if route not in ROUTES:
        raise BrokerError(f"sink option route={route!r}; expected one of {', '.join(ROUTES)}")
    return SinkOptions(url, prefix, _positive_int("dedup_window_s", given.get("dedup_window_s", _DEFAULT_WINDOW_S), 1),
                       _positive_int("maxlen", given.get("maxlen", 0), 0), route)


def check_columns(columns: Iterable[str], route: str) -> None:
    """That output with ``columns`` can be routed by ``route`` (on the driver, before any task runs)."""
    columns = set(columns)
    if ID_FIELD in columns:
        raise BrokerError(f"the notifications have a column {ID_FIELD!r}, the name the sink gives its message id")
    if "seq" not in columns:
        raise BrokerError("the notifications have no seq column: not an engine's publish or stream output")
    need = {"subscriber": ("subscription_id",), "group": ("group_id",),
            "auto": ("subscription_id", "group_id")}[route]
    if not columns.intersection(need):
        raise BrokerError(f"route={route!r} needs a column {' or '.join(need)}; the notifications have "
                          f"{', '.join(sorted(columns))}")


def stream_key(prefix: str, route: str, row: Mapping[str, object]) -> str:
    """The stream a notification ``row`` goes to (module docstring, "Routing")."""
    op = row.get("op")
    if op in UNADDRESSED:
        return f"{prefix}:{UNADDRESSED[op]}"
    sub, group = row.get("subscription_id"), row.get("group_id")
    if route != "group" and sub is not None:
        return f"{prefix}:sub:{sub}"
    if route != "subscriber" and group is not None:
        return f"{prefix}:group:{group}"
    want = {"subscriber": "a subscription_id (a reformulated message: deliver() it first, or route='group')",
            "group": "a group_id", "auto": "a subscription_id or a group_id"}[route]
    raise BrokerError(f"route={route!r}: the notification with seq={row.get('seq')!r}, op={op!r} has no "
                      f"{want}; nowhere to send it")


def encode_value(value) -> str | None:
    """A column value as stream-field text (module docstring, "Encoding"); None for NULL."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    return json.dumps(value, sort_keys=True, default=str, allow_nan=True)


def encode_row(row: Mapping[str, object]) -> dict[str, str]:
    """A row's non-null columns as stream fields, in the row's column order."""
    out = {}
    for name, value in row.items():
        text = encode_value(value)
        if text is not None:
            out[name] = text
    return out


def message_id(key: str, fields: Mapping[str, str]) -> str:
    """The deterministic id of the row with encoded ``fields`` bound for stream ``key``: ``<seq>-<16 hex>``
    (module docstring, "At-least-once with idempotent ids")."""
    h = hashlib.blake2b(digest_size=8)
    h.update(key.encode())
    for name in sorted(fields):
        h.update(b"\x1f" + name.encode() + b"\x1e" + fields[name].encode())
    return f"{fields.get('seq', 'x')}-{h.hexdigest()}"


def _client(url: str, **kw):
    import redis
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=10, socket_timeout=60, **kw)
    except ValueError as err:
        raise BrokerError(f"sink option url={redact_url(url)!r}: {err}") from None


class NotificationWriter:
    """Writes notification rows to Redis streams, each at most once per message id (one connection; pipelined,
    :data:`PIPELINE_ROWS` rows per round trip).  ``write(rows)`` returns ``(appended, duplicates)``; use as a
    context manager, or ``close()``."""

    def __init__(self, options: SinkOptions):
        self.options = options
        self._redis = _client(options.url)
        self._append = self._redis.register_script(_APPEND_ONCE)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self._redis.close()

    def write(self, rows: Iterable[Mapping[str, object]]) -> tuple[int, int]:
        appended = duplicates = 0
        batch: list[tuple[str, dict[str, str]]] = []
        for row in rows:
            key = stream_key(self.options.prefix, self.options.route, row)
            batch.append((key, encode_row(row)))
            if len(batch) >= PIPELINE_ROWS:
                a, d = self._flush(batch)
                appended, duplicates, batch = appended + a, duplicates + d, []
        if batch:
            a, d = self._flush(batch)
            appended, duplicates = appended + a, duplicates + d
        return appended, duplicates

    def _flush(self, batch) -> tuple[int, int]:
        import redis
        o = self.options
        pipe = self._redis.pipeline(transaction=False)
        for start in range(0, len(batch), SCRIPT_ROWS):
            keys, args = [], [o.dedup_window_s, o.maxlen]
            for key, fields in batch[start:start + SCRIPT_ROWS]:
                mid = message_id(key, fields)
                keys += (f"{o.prefix}:seen:{mid}", key)
                args.append(2 * len(fields) + 2)
                for name, text in fields.items():
                    args += (name, text)
                args += (ID_FIELD, mid)
            self._append(keys=keys, args=args, client=pipe)
        try:
            appended = sum(pipe.execute())
        except redis.RedisError as err:
            raise BrokerError(f"Redis at {redact_url(o.url)}: writing {len(batch)} notifications failed: "
                              f"{type(err).__name__}: {err}") from err
        return appended, len(batch) - appended

    def add_stats(self, appended: int, duplicates: int, batch_id=None) -> None:
        """Count a committed write in the hash ``<prefix>:stats`` (fields ``appended``, ``duplicates``,
        ``writes``, and ``last_batch_id`` of a stream)."""
        key = f"{self.options.prefix}:stats"
        pipe = self._redis.pipeline(transaction=True)
        pipe.hincrby(key, "appended", appended).hincrby(key, "duplicates", duplicates).hincrby(key, "writes", 1)
        if batch_id is not None:
            pipe.hset(key, "last_batch_id", int(batch_id))
        pipe.execute()


def read_stream(url: str, key: str, after_id: str = "0-0", count: int | None = None) -> list[tuple[str, dict]]:
    """The entries of stream ``key`` after entry id ``after_id`` (exclusive; ``"0-0"``: from the start), oldest
    first, at most ``count``: ``(entry_id, {field: text})``.  A consumer that remembers the last entry id it
    handled resumes with it and misses nothing the stream still holds (``maxlen`` trims the oldest)."""
    r = _client(url, decode_responses=True)
    try:
        return [(eid, fields) for eid, fields in r.xrange(key, min=f"({after_id}", max="+", count=count)]
    finally:
        r.close()


def stream_keys(url: str, prefix: str = "sparksub") -> list[str]:
    """The notification streams under ``prefix`` (subscribers', groups', rejected, errors), sorted."""
    r = _client(url, decode_responses=True)
    try:
        keys = [k for k in r.scan_iter(match=f"{prefix}:*", count=1000)
                if not k.startswith(f"{prefix}:seen:") and k != f"{prefix}:stats"]
        return sorted(k for k in keys if r.type(k) == "stream")
    finally:
        r.close()


def decode_entry(fields: Mapping[str, str], types: Mapping[str, str]) -> dict:
    """An entry's fields as typed values, given ``types`` (column -> Spark type name: ``string``, ``double``,
    ``bigint``, ``int``, ``tinyint``, ``boolean``; others stay text); an absent column is None; the message
    id is left out."""
    out = {}
    for name, t in types.items():
        text = fields.get(name)
        if text is None:
            out[name] = None
        elif t in ("double", "float"):
            out[name] = float(text)
        elif t in ("bigint", "int", "smallint", "tinyint"):
            out[name] = int(text)
        elif t == "boolean":
            out[name] = text == "true"
        else:
            out[name] = text
    return out
