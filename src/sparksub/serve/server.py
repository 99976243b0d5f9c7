"""``sparksub serve PATH``: open the engine directory and serve it in the foreground until interrupted.

``ServeConfig.fanout_workers`` > 0: the multi-process server (``workers.py``) -- the engine here, the live
streams in that many fan-out processes sharing the port."""
from __future__ import annotations

import time

import uvicorn

from sparksub.serve.app import create_app
from sparksub.serve.config import ServeConfig

__all__ = ["serve"]


def serve(path, host: str = "127.0.0.1", port: int = 8765, config: ServeConfig | None = None,
          log_level: str = "info", engine_options: dict | None = None, streams=(),
          stream_trigger_seconds: float = 1.0) -> None:
    """Open ``Engine(path=path)`` (the durable directory: its tables, subscriptions and kept notifications)
    and serve it on ``host:port`` until interrupted; the engine is closed (checkpointed) on the way out.
    ``streams``: the engine's streams to keep running (``create_app``; ``engine_streams.py``)."""
    from sparksub import Engine
    config = config or ServeConfig()
    engine = Engine(path=path, **(engine_options or {}))
    try:
        app = create_app(engine, config, streams, stream_trigger_seconds=stream_trigger_seconds)
        if config.fanout_workers:
            from sparksub.serve.background import BackgroundServer
            server = BackgroundServer(app, host, port, log_level, workers=config.fanout_workers).start()
            try:
                while server.alive():
                    time.sleep(0.5)
            except KeyboardInterrupt:
                pass
            finally:
                server.stop()
        else:
            uvicorn.run(app, host=host, port=port, log_level=log_level,
                        ws_ping_interval=config.ws_ping_seconds, ws_ping_timeout=config.ws_ping_timeout_seconds,
                        timeout_keep_alive=config.keep_alive_seconds)
    finally:
        engine.close()
