"""Access tokens of the subscription server: issued by an admin command, kept hashed in the engine directory.

``sparksub token PATH --client NAME [--publisher | --admin]`` writes ``PATH/serve/tokens.json`` and prints
the token once; the server reads the file again whenever it changes, so a token issued while the server
runs works at once, and a client removed from the file is refused at its next request.  Only the SHA-256 of
each token is kept: a token is 256 random bits (``secrets``), so a plain hash cannot be reversed by guessing
and needs no salt or slow key derivation, and a stolen file gives no usable token.

Roles: ``client`` (subscriptions and event queries of its own, its notifications), ``publisher`` (a client
that may also publish batches), ``admin`` (a publisher that may also declare tables and sees every group).
A client's name becomes the prefix of its subscriptions' ids in the engine (``ownership.py``), so names are
restricted to letters, digits, ``_`` and ``-``.

The admin command runs without Spark or the server's packages: stdlib only, save that a directory that is
not an engine's yet is made one first (``Engine(path=...)`` opened and closed, which starts no Spark session),
because an engine refuses a directory that holds files of anything else.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROLES", "Principal", "TokenStore", "token_file", "issue_token"]

#: the roles, each allowed what the ones before it are
ROLES = ("client", "publisher", "admin")
#: a client name: the prefix of its subscription ids in the engine (no ``.``: the separator)
CLIENT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


@dataclass(frozen=True)
class Principal:
    """Who a request comes from: the client's name and role."""
    client: str
    role: str

    def allowed(self, role: str) -> bool:
        """Whether this principal's role includes ``role``."""
        return ROLES.index(self.role) >= ROLES.index(role)


def token_file(path) -> Path:
    """Where an engine directory keeps its tokens' hashes."""
    return Path(path).expanduser() / "serve" / "tokens.json"


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def issue_token(path, client: str, role: str = "client") -> str:
    """A new token for ``client`` with ``role``, its hash added to ``PATH/serve/tokens.json`` (created with
    mode 0600, written atomically); returns the token, which is kept nowhere else."""
    if not isinstance(client, str) or not CLIENT_NAME.fullmatch(client):
        raise ValueError(f"client name {client!r}: use 1-64 letters, digits, '_' or '-' (it prefixes the "
                         f"client's subscription ids)")
    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}; expected one of {', '.join(ROLES)}")
    _engine_directory(path)
    file = token_file(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    token = "ssk_" + secrets.token_urlsafe(32)
    entries = _read(file)
    entries.append({"client": client, "role": role, "sha256": _digest(token), "issued": time.time()})
    tmp = file.with_suffix(f".tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump({"tokens": entries}, out, indent=1)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, file)
    return token


def _engine_directory(path) -> None:
    """Make ``path`` an engine directory unless it is one (its marker file ``SPARKSUB``)."""
    root = Path(path).expanduser()
    if not (root / "SPARKSUB").exists():
        from sparksub.engine import Engine
        Engine(path=root).close()


def _read(file: Path) -> list[dict]:
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        raise ValueError(f"{file}: not a token file ({err})") from None
    entries = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{file}: not a token file (no 'tokens' list)")
    return entries


class TokenStore:
    """The server's view of ``PATH/serve/tokens.json``: ``verify(token)`` -> the Principal, or None.
    Re-reads the file when its modification time or size changed."""

    def __init__(self, path):
        self.file = token_file(path)
        self._lock = threading.Lock()
        self._stamp = None
        self._by_digest: dict[str, Principal] = {}

    def _refresh(self) -> None:
        try:
            st = self.file.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        entries = _read(self.file) if stamp is not None else []
        self._by_digest = {e["sha256"]: Principal(e["client"], e["role"]) for e in entries
                           if isinstance(e, dict) and e.get("role") in ROLES and isinstance(e.get("sha256"), str)}
        self._stamp = stamp

    def verify(self, token: str | None) -> Principal | None:
        if not token:
            return None
        # looked up by the token's hash: a lookup's timing tells an attacker about hashes, not tokens
        digest = _digest(token)
        with self._lock:
            self._refresh()
            return self._by_digest.get(digest)
