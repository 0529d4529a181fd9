"""A scratch PostgreSQL database, for the durable-run and history tests and benchmark (no pytest
needed)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def fresh_database(server_url: str, prefix: str = "gs_durable") -> Iterator[str]:
    """A new database on the server at ``server_url`` (any SQLAlchemy URL), dropped afterwards.

    Yields its libpq-style URL (``postgresql://...``), as DBOS and psycopg take it.
    """
    import psycopg
    from sqlalchemy.engine import make_url

    server = make_url(server_url).set(drivername="postgresql")
    name = f"{prefix}_{os.getpid()}_{os.urandom(3).hex()}"
    admin = server.render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
