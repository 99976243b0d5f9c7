"""Build the extension jar from ``java/`` with ``javac`` against the jars inside the installed pyspark.

No Maven and no committed binary: the sources are package data, compiled on first use (~3 s) into a
cache keyed by the Spark version and a hash of the sources (``$SPARKSUB_JVM_CACHE``, default
``~/.cache/sparksub/jvm``), or ahead of time with ``sparksub jvm build``.  pip builds the package in an
isolated environment without pyspark, so there is no Spark to compile against at install time.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from pathlib import Path

from sparksub.errors import CatalystUnavailable

__all__ = ["EXTENSION_CLASS", "SOURCES", "extension_conf", "jar_path", "javac"]

#: the value of ``spark.sql.extensions``
EXTENSION_CLASS = "sparksub.SparksubExtensions"
SOURCES = Path(__file__).parent / "java"
#: seconds the last build took (None: the jar came from the cache)
last_build_seconds: float | None = None


def javac() -> str:
    """The ``javac`` to use: ``$JAVA_HOME/bin/javac``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").exists():
        return str(Path(home) / "bin" / "javac")
    found = shutil.which("javac")
    if not found:
        raise CatalystUnavailable("no javac found (set JAVA_HOME to a JDK, or put javac on PATH); "
                                  "a JRE runs Spark but cannot build the extension")
    return found


def _spark_jars() -> tuple[str, Path]:
    try:
        import pyspark
    except ImportError as err:  # pragma: no cover - pyspark is a dependency
        raise CatalystUnavailable(f"pyspark is not importable: {err}") from err
    jars = Path(pyspark.__file__).parent / "jars"
    if not jars.is_dir():
        raise CatalystUnavailable(f"pyspark has no jars directory at {jars} (a pyspark-client install?)")
    return pyspark.__version__, jars


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


def jar_path(build: bool = True, cache: str | os.PathLike | None = None) -> Path:
    """The extension jar for the installed Spark, built now if the cache has none (``build=False``:
    raise instead).  Raises ``CatalystUnavailable`` naming why it cannot be had."""
    global last_build_seconds
    version, jars = _spark_jars()
    digest = hashlib.sha256()
    for src in _sources():
        digest.update(src.name.encode() + b"\0" + src.read_bytes())
    root = Path(cache or os.environ.get("SPARKSUB_JVM_CACHE") or Path.home() / ".cache" / "sparksub" / "jvm")
    jar = root / f"spark-{version}-{digest.hexdigest()[:12]}" / "sparksub-catalyst.jar"
    if jar.exists():
        last_build_seconds = None
        return jar
    if not build:
        raise CatalystUnavailable(f"the extension jar is not built yet ({jar})")
    compiler = javac()
    start = time.perf_counter()
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        classes = Path(tmp) / "classes"
        classes.mkdir()
        cmd = [compiler, "-nowarn", "-encoding", "UTF-8", "-cp", f"{jars}{os.sep}*", "-d", str(classes),
               *map(str, _sources())]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise CatalystUnavailable(f"javac failed building the extension against Spark {version}:\n"
                                      f"{done.stderr.strip()[-2000:]}")
        staged = Path(tmp) / "sparksub-catalyst.jar"
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: sparksub\n\n")
            for f in sorted(classes.rglob("*.class")):
                z.write(f, f.relative_to(classes).as_posix())
        os.replace(staged, jar)  # atomic: concurrent first uses build twice, never half a jar
    last_build_seconds = time.perf_counter() - start
    return jar


def extension_conf(jar: Path | None = None, existing_jars: str = "") -> dict:
    """The two settings a SparkSession needs for the extension (``spark.jars`` also ships the jar to
    executors)."""
    jar = jar or jar_path()
    jars = ",".join(j for j in (existing_jars, str(jar)) if j)
    return {"spark.jars": jars, "spark.sql.extensions": EXTENSION_CLASS}
