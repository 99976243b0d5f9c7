"""``sparksub serve PATH``: open the engine directory and serve it in the foreground until interrupted."""
from __future__ import annotations

import uvicorn

from sparksub.serve.app import create_app
from sparksub.serve.config import ServeConfig

__all__ = ["serve"]


def serve(path, host: str = "127.0.0.1", port: int = 8765, config: ServeConfig | None = None,
          log_level: str = "info", engine_options: dict | None = None) -> None:
    """Open ``Engine(path=path)`` (the durable directory: its tables, subscriptions and kept notifications)
    and serve it on ``host:port`` until interrupted; the engine is closed (checkpointed) on the way out."""
    from sparksub import Engine
    config = config or ServeConfig()
    engine = Engine(path=path, **(engine_options or {}))
    try:
        uvicorn.run(create_app(engine, config), host=host, port=port, log_level=log_level,
                    ws_ping_interval=config.ws_ping_seconds, ws_ping_timeout=config.ws_ping_timeout_seconds)
    finally:
        engine.close()
