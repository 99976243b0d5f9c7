"""A uvicorn server in a background thread of this process, on a loopback port it picked itself: how the
tests and the serving benchmark run the real server next to an engine they hold (``sparksub serve`` runs it
in the foreground instead, ``server.py``).

``workers=N`` (N >= 1): the multi-process server of ``workers.py`` -- the app (the engine's side) in the
thread on a Unix socket, N fan-out processes on the port holding the live streams."""
from __future__ import annotations

import socket
import threading
import time

import uvicorn

__all__ = ["BackgroundServer"]


class BackgroundServer:
    """``with BackgroundServer(app) as server: server.url``.  ``port=0``: a free port."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning", workers: int = 0):
        self.app, self.host = app, host
        self.pool = None
        config = getattr(getattr(app, "state", None), "config", None)   # create_app's ServeConfig
        pings = {} if config is None else {"ws_ping_interval": config.ws_ping_seconds,
                                           "ws_ping_timeout": config.ws_ping_timeout_seconds,
                                           "timeout_keep_alive": config.keep_alive_seconds}
        if workers:
            from sparksub.serve.workers import EngineSide, FanoutPool
            self.pool = FanoutPool(app, workers, host, port, log_level)
            self.port = self.pool.port
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._socket.bind(self.pool.engine_uds)
            served = EngineSide(app)
        else:
            self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            self.port = self._socket.getsockname()[1]
            served = app
        self._server = uvicorn.Server(uvicorn.Config(served, log_level=log_level, lifespan="on",
                                                     timeout_graceful_shutdown=2, **pings))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def pids(self) -> list[int]:
        """The fan-out processes' ids (none: the streams are served in this process)."""
        return self.pool.pids if self.pool is not None else []

    def start(self, timeout: float = 30.0) -> "BackgroundServer":
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name=f"sparksub-serve:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on {self.url} did not start")
            time.sleep(0.02)
        if self.pool is not None:   # after the engine's side listens: the fan-out processes ask it
            self.pool.start(timeout=max(60.0, timeout))
        return self

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        if self.pool is not None:
            self.pool.stop()
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
