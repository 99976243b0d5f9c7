"""Request bodies as rows: a publish batch or a parameter table, sent as JSON lines, a JSON array, CSV or
Arrow IPC; the ``Content-Type`` decides, and a type the server does not read is refused (415) before the body
is parsed.  CSV columns take the table's declared types (an empty field is null), so ``"007"`` stays a
string where the table says STRING; the engine then checks the rows as it checks any batch (DESIGN §7).
"""
from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.ipc as pa_ipc

__all__ = ["BodyError", "CONTENT_TYPES", "media_type", "read_rows"]

JSON_LINES = ("application/x-ndjson", "application/jsonl", "application/json-lines", "application/jsonlines",
              "application/x-jsonlines")
ARROW_STREAM = ("application/vnd.apache.arrow.stream",)
ARROW_FILE = ("application/vnd.apache.arrow.file", "application/x-apache-arrow-file")
#: what a batch or a parameter table may be sent as
CONTENT_TYPES = (*JSON_LINES, "application/json", "text/csv", *ARROW_STREAM, *ARROW_FILE)


class BodyError(Exception):
    """A body that cannot be read as rows: ``status`` (400, 415), the message and where."""

    def __init__(self, message: str, where: str, status: int = 400):
        super().__init__(message)
        self.status, self.where = status, where


def media_type(header: str | None) -> str:
    """``text/csv; charset=utf-8`` -> ``text/csv``."""
    return (header or "").split(";", 1)[0].strip().lower()


def read_rows(body: bytes, content_type: str | None, column_types: dict | None = None):
    """The rows of ``body``: a list of row dicts (JSON) or an Arrow table (CSV, Arrow).  ``column_types``:
    column name -> Arrow type for CSV (the table's schema; other columns are inferred)."""
    kind = media_type(content_type)
    if kind not in CONTENT_TYPES:
        raise BodyError(f"unsupported content type {kind or '(none)'!r}; send one of {', '.join(CONTENT_TYPES)}",
                        "header Content-Type", 415)
    if not body.strip():
        raise BodyError("empty body: a batch needs at least one row", "body")
    if kind in JSON_LINES:
        rows = []
        for n, line in enumerate(body.decode("utf-8", errors="strict").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as err:
                raise BodyError(f"not JSON: {err}", f"body line {n}") from None
            if not isinstance(row, dict):
                raise BodyError(f"a row is a JSON object, got {type(row).__name__}", f"body line {n}")
            rows.append(row)
        if not rows:
            raise BodyError("no rows: a batch needs at least one row", "body")
        return rows
    if kind == "application/json":
        try:
            data = json.loads(body)
        except ValueError as err:
            raise BodyError(f"not JSON: {err}", "body") from None
        if isinstance(data, dict) and all(isinstance(v, list) for v in data.values()):
            lengths = {len(v) for v in data.values()}
            if len(lengths) > 1:
                raise BodyError(f"columns of different lengths: { {k: len(v) for k, v in data.items()} }", "body")
            data = [dict(zip(data, values)) for values in zip(*data.values())]
        if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
            raise BodyError("a JSON body is an array of row objects or an object of column arrays", "body")
        if not data:
            raise BodyError("no rows: a batch needs at least one row", "body")
        return data
    if kind == "text/csv":
        try:
            table = pa_csv.read_csv(io.BytesIO(body), convert_options=pa_csv.ConvertOptions(
                column_types=column_types or {}, strings_can_be_null=True, null_values=[""]))
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as err:
            raise BodyError(f"not CSV with a header line the table's types can read: {err}", "body") from None
    else:
        try:
            if kind in ARROW_STREAM:
                table = pa_ipc.open_stream(body).read_all()
            else:
                table = pa_ipc.open_file(pa.py_buffer(body)).read_all()
        except (pa.ArrowInvalid, pa.ArrowTypeError, OSError) as err:
            raise BodyError(f"not Arrow IPC ({'stream' if kind in ARROW_STREAM else 'file'} format): {err}",
                            "body") from None
    if not table.num_rows:
        raise BodyError("no rows: a batch needs at least one row", "body")
    return table
