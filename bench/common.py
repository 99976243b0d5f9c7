"""What every benchmark script shares: the machine it ran on, and Markdown formatting."""
from __future__ import annotations

import datetime as _dt
import os
import platform
from pathlib import Path

import numpy as np
import pyarrow as pa


def machine() -> dict:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import pyspark
    return {"date": _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"),
            "platform": platform.platform(), "cpu_count": os.cpu_count(), "cpu": cpu,
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "numpy": np.__version__, "pyarrow": pa.__version__}


def load_avg() -> str:
    try:
        return "/".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:
        return "n/a"


def fmt_num(v, digits=2) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:.{digits}f}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def log(msg: str) -> None:
    print(msg, flush=True)

