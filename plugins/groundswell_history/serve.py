"""One app for Groundswell's HTTP surfaces: the waits API, and the history API over a store.

`serve_app` builds it (``groundswell serve`` serves it). Waits live in the
process that opened them (on the local engine), so the app that answers them
must run in the process that runs the workflows: `serving` starts it there, on
a background thread, next to your runs::

    with serving(port=8765) as server:   # or: async with serving(...)
        asyncio.run(main())              # `groundswell pending` now lists its waits

To add it to an app of your own, mount it: ``your_app.mount("/gs", serve_app())``
(its routes are then under ``/gs/api/...``; give the CLI ``--url http://HOST/gs``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from fastapi import FastAPI

from groundswell import ConfigurationError

from .api import add_history_routes, make_app
from .api_gate import refusals
from .api_ui import add_ui_routes
from .api_waits import add_wait_routes
from .store import SCHEMA_VERSION, HistoryStore, default_url

__all__ = ["DEFAULT_PORT", "Serving", "is_loopback", "serve_app", "serving"]

#: Where ``groundswell serve``, `serving` and the ``groundswell pending`` commands meet.
DEFAULT_PORT = 8765
STARTUP_TIMEOUT_S = 10.0


def serve_app(
    history: HistoryStore | str | bool | None = None,
    *,
    secret: bytes | None = None,
    trace_dir: str | os.PathLike[str] | None = None,
    workflows: Any = None,
) -> FastAPI:
    """The app ``groundswell serve`` serves: the waits API, the dev UI, and the history API
    when asked.

    The dev UI (``/ui``, ``/api/runs``, ``/api/workflows``; `groundswell_history.api_ui`)
    lists the runs of this process and of ``trace_dir`` (default:
    ``GROUNDSWELL_TRACE_DIR``), and starts the ``workflows`` given (`Workflow`
    objects or ``"module:name"`` strings) from a form.

    ``history`` is ``None`` or ``False`` for the waits API alone, ``True`` for
    the default history store too (`default_url`), or a `HistoryStore` or a
    SQLAlchemy URL. A store it opens from a URL it closes when the app shuts
    down; a store given is left open for its owner. ``secret`` signs the
    tokens (default: the history API's secret, `groundswell_history.auth`).
    """
    store: HistoryStore | None
    if history is None or history is False:
        store = None
    elif history is True:
        store = HistoryStore(default_url())
    elif isinstance(history, HistoryStore | str):
        store = history if isinstance(history, HistoryStore) else HistoryStore(history)
    else:
        raise ConfigurationError(
            f"serve_app(history=...) takes a HistoryStore, a SQLAlchemy URL, True (the default "
            f"store) or None (no history API), got {type(history).__name__}"
        )
    app, gate = make_app(
        store,
        secret,
        close_store=store is not None and store is not history,
        title="Groundswell",
        description=(
            "The open waits of this process (list them, approve, reject or answer one), "
            "the dev UI's runs (/ui, /api/runs, /api/workflows)"
            + (", and the history API (agents' past sessions)" if store is not None else "")
            + ". Every request but /api/health needs a bearer token (`groundswell history "
            "token AGENT_ID`): an agent's token sees only its agent's waits and sessions; an "
            "operator token (`--operator`) sees all."
        ),
    )
    add_wait_routes(app, gate)
    ui = add_ui_routes(app, gate, trace_dir=trace_dir, workflows=workflows)
    app.state.starters.append(ui.start)
    app.state.closers.append(ui.close)
    if store is not None:
        add_history_routes(app, gate, store)
    else:

        @app.get("/api/health", summary="Is the app up?", responses=refusals(503))
        def health() -> Any:
            return {"status": "ok", "schema_version": SCHEMA_VERSION, "history": False}

    return app


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable only from this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Serving:
    """`serve_app` (or another ASGI app) served by uvicorn on a background thread.

    Use it as ``with`` or ``async with`` (or `start` and `stop`); ``url`` is
    where it listens (``port=0`` picks a free port).
    """

    def __init__(
        self,
        app: Any,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        log_level: str = "warning",
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def url(self) -> str:
        """The server's base URL, e.g. ``http://127.0.0.1:8765``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> Serving:
        """Listen and serve; returns once the server answers (or raises why it cannot)."""
        if self._thread is not None:
            raise ConfigurationError(f"the server at {self.url} is running already")
        try:
            # Bound here, so a taken port is an error in the caller's thread.
            sock = socket.create_server((self.host, self.port))
        except OSError as exc:
            raise ConfigurationError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc} "
                "(is another server using the port? choose another, or port=0 for a free one)"
            ) from None
        self.port = sock.getsockname()[1]
        # The thread's own event loop: the server keeps answering while your code holds
        # its loop, and the answers reach the runs' loops from any thread.
        config = uvicorn.Config(self.app, log_level=self.log_level, lifespan="on")
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="groundswell-serve", daemon=True
        )
        self._server, self._thread, self._socket = server, thread, sock
        thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise ConfigurationError(
                    f"the server at {self.url} did not start (its log on stderr says why)"
                )
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving (requests in flight are answered first) and free the port."""
        server, thread, sock = self._server, self._thread, self._socket
        self._server = self._thread = self._socket = None
        if server is not None:
            server.should_exit = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(STARTUP_TIMEOUT_S)
        if sock is not None:
            sock.close()

    def __enter__(self) -> Serving:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Serving:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


def serving(
    app: Any = None,
    *,
    history: HistoryStore | str | bool | None = None,
    secret: bytes | None = None,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    log_level: str = "warning",
) -> Serving:
    """Serve ``app`` (default: ``serve_app(history, secret=secret)``) in this process.

    ``with serving() as server:`` (or ``async with``) serves on ``host``:``port``
    (loopback by default; ``port=0`` for a free port, then read ``server.url``)
    while the block runs: the waits your workflows open in this process can be
    listed and answered over HTTP and with ``groundswell pending``.
    """
    if app is None:
        app = serve_app(history, secret=secret)
    elif history is not None or secret is not None:
        raise ConfigurationError(
            "serving(app, ...): history= and secret= build the default app; give them to "
            "serve_app(...) instead when you pass an app"
        )
    return Serving(app, host=host, port=port, log_level=log_level)
