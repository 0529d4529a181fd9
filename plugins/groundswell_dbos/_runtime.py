"""The DBOS instance Groundswell runs on: settings, launch, and executor liveness.

DBOS recovers a crashed process's workflows when a process with the same
executor id starts again. Workers on several machines need more: when one dies
mid-run, another must take its work over. Every Groundswell process therefore
holds a *shared* lock named after its executor id for as long as it lives (a
PostgreSQL advisory lock on its own connection, or a file lock next to a
SQLite database). The lock goes away with the process, however it dies, so a
process that finds no one holding it knows no live process has that id, and
hands the dead executor's pending workflows back to their queues.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import socket
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from groundswell import ConfigurationError

__all__ = [
    "Takeover",
    "configure",
    "dead_executors",
    "executor_id",
    "launch",
    "liveness",
    "pin",
    "settings",
    "shutdown",
]

logger = logging.getLogger("groundswell.dbos")

APP_NAME = "groundswell"
# The first key of the two-key advisory lock form: "gS", so ours never clash with
# an application's single-key locks.
_LOCK_CLASS = 0x6753

# How often a process checks that it still holds its liveness lock, and how long
# an executor's lock must stay free before others take it for dead.
KEEPALIVE_S = 1.0
TAKEOVER_GRACE_S = float(os.environ.get("GROUNDSWELL_DBOS_TAKEOVER_GRACE_S", "5"))

_lock = threading.RLock()
_settings: dict[str, Any] = {}
_pinned: dict[str, Any] = {}
# The settings DBOS was launched with here (empty when the application launched it).
_launched_with: dict[str, Any] = {}
_launched = False
_listening: list[str] | None = None
_liveness: Liveness | None = None


def _home() -> Path:
    return Path(os.environ.get("GROUNDSWELL_HOME") or Path.home() / ".groundswell")


def configure(**config: Any) -> None:
    """Set DBOS settings (``DBOSConfig`` keys) before the first durable run or worker.

    ``system_database_url`` is the one that matters: a PostgreSQL URL for runs
    shared by several processes or machines, or a SQLite URL for one machine.
    Without it, ``DBOS_SYSTEM_DATABASE_URL`` is used, else
    ``sqlite:///~/.groundswell/dbos.sqlite``. Settings a worker was started
    with, and settings that differ from those DBOS already runs with, are
    ignored with a warning.
    """
    with _lock:
        ignored = {
            k
            for k, v in config.items()
            if (k in _pinned and _pinned[k] != v) or (_launched and _launched_with.get(k) != v)
        }
        if ignored:
            current = {**_launched_with, **_pinned}
            given = ", ".join(f"{k}={_shown(k, config[k])}" for k in sorted(ignored))
            running = (
                ", ".join(f"{k}={_shown(k, current[k])}" for k in sorted(ignored) if k in current)
                or "the application's own settings"
            )
            logger.warning(
                "groundswell_dbos.configure(): %s ignored; this process runs DBOS with %s",
                given,
                running,
            )
        _settings.update({k: v for k, v in config.items() if k not in ignored})
        _claim_before_app_launch()


def _claim_before_app_launch() -> None:
    """Hold this process's liveness lock before an application launches DBOS itself.

    DBOS resumes this executor's pending runs as it launches; without the lock
    held by then, another process could take this live one for dead.
    """
    global _liveness
    import dbos._dbos as dbos_state

    instance = dbos_state._dbos_global_instance
    if instance is None or instance._launched or _liveness is not None:
        return
    alive = Liveness(str(instance._config["system_database_url"]), executor_id())
    try:
        alive.hold()
    except ConfigurationError:
        raise
    except Exception as exc:  # a database DBOS has yet to create; launch() holds it after
        logger.debug("liveness lock not taken before launch: %s", exc)
        return
    _liveness = alive


def pin(**config: Any) -> None:
    """Settings that win over any `configure` call (a worker's ``--url``)."""
    with _lock:
        _pinned.update(config)


def _shown(key: str, value: Any) -> str:
    return _redact_url(str(value)) if key.endswith("url") else repr(value)


def settings() -> dict[str, Any]:
    """The ``DBOSConfig`` Groundswell launches DBOS with."""
    config: dict[str, Any] = {"name": APP_NAME, "log_level": "WARNING", **_settings, **_pinned}
    if not config.get("system_database_url"):
        url = os.environ.get("DBOS_SYSTEM_DATABASE_URL")
        if not url:
            home = _home()
            home.mkdir(parents=True, exist_ok=True)
            url = f"sqlite:///{home / 'dbos.sqlite'}"
        config["system_database_url"] = url
    return config


def launch(*, listen: list[str] | None = None, executor: str | None = None) -> None:
    """Launch DBOS once per process (or adopt one the application launched).

    ``listen`` names the queues this process takes work from (a worker); by
    default a process only enqueues. ``executor`` sets the executor id (default:
    host, pid and a random suffix; ``DBOS__VMID`` or a configured
    ``executor_id`` win, as in DBOS).
    """
    global _launched, _listening, _liveness, _launched_with
    with _lock:
        if _launched:
            if listen and sorted(listen) != sorted(_listening or []):
                raise ConfigurationError(
                    f"DBOS already runs in this process listening to {_listening or []}; "
                    f"a worker for {listen} needs a process of its own"
                )
            return
        import dbos._dbos as dbos_state
        from dbos import DBOS

        instance = dbos_state._dbos_global_instance
        created = instance is None
        if instance is None:
            config = settings()
            if not os.environ.get("DBOS__VMID"):
                # Every process gets an id of its own: DBOS recovers an id's pending runs
                # when a process with that id launches, which would take over the live
                # runs of another process sharing it. Dead processes are found by their
                # locks instead (see recover() and the workers' takeover loop).
                config.setdefault("executor_id", executor or new_worker_id())
            _launched_with = dict(config)
            try:
                DBOS(config=config)  # type: ignore[arg-type]
            except Exception as exc:
                raise ConfigurationError(
                    f"DBOS could not start with system database {_safe(config)}: "
                    f"{type(exc).__name__}: {_first_line(exc)}"
                ) from exc
            instance = dbos_state._dbos_global_instance
        assert instance is not None
        if not created and executor_id() == "local" and not os.environ.get("DBOS__VMID"):
            logger.warning(
                "the application's DBOS runs with executor id 'local'; give every process "
                "its own (executor_id or DBOS__VMID) so that recovery can tell which died"
            )
        if _liveness is not None and _liveness.me == executor_id():
            alive = _liveness  # taken by configure() before the application launched DBOS
        else:
            alive = Liveness(str(instance._config["system_database_url"]), executor_id())
        if not instance._launched:
            if not alive.held:
                try:
                    # Before launch: DBOS takes over an executor id's pending runs when
                    # it launches, which must not happen to the runs of a live process.
                    alive.hold()
                except ConfigurationError:
                    if created:
                        DBOS.destroy()
                    raise
                except Exception:
                    pass  # a database DBOS has yet to create: no process can share it yet
            DBOS.listen_queues(list(listen or []))
            dbos_logger = logging.getLogger("dbos")
            was = dbos_logger.disabled
            # A failed launch logs its traceback; the error raised below says it in one line.
            dbos_logger.disabled = True
            try:
                DBOS.launch()
            except Exception as exc:
                url = instance._config.get("system_database_url")
                alive.release()
                DBOS.destroy()  # a half-launched instance cannot be launched again
                raise ConfigurationError(
                    f"DBOS could not launch on {_redact_url(str(url))}: {type(exc).__name__}: "
                    f"{_first_line(exc)}; check the URL and that the database server is running"
                ) from exc
            finally:
                dbos_logger.disabled = was
        _listening = list(listen or [])
        if not alive.held:
            alive.hold()
        _liveness = alive
        _launched = True
        logger.info("DBOS launched as executor %s", executor_id())


def shutdown(timeout: float = 5.0) -> None:
    """Stop DBOS in this process (workers on SIGTERM; tests)."""
    global _launched, _liveness, _listening, _launched_with
    with _lock:
        from dbos import DBOS

        if _launched:
            DBOS.destroy(workflow_completion_timeout_sec=int(timeout))
        if _liveness is not None:
            _liveness.release()
        _launched, _liveness, _listening, _launched_with = False, None, None, {}


def is_launched() -> bool:
    """True once this process has launched DBOS through Groundswell."""
    return _launched


def executor_id() -> str:
    """This process's DBOS executor id (host-pid-random unless one was set)."""
    from dbos._utils import GlobalParams

    return str(GlobalParams.executor_id)


def new_worker_id() -> str:
    """A unique executor id for a worker: host, process id and a random suffix."""
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def liveness() -> Liveness:
    """The liveness locks of this process's system database."""
    if _liveness is None:
        raise ConfigurationError("DBOS has not launched in this process")
    return _liveness


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _safe(config: dict[str, Any]) -> str:
    return _redact_url(str(config.get("system_database_url", "")))


def _redact_url(url: str) -> str:
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "(an unparsable URL)"


class Liveness:
    """Who is alive among the executors sharing a system database."""

    def __init__(self, url: str, me: str) -> None:
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        self.me = me
        self.postgres = parsed.get_backend_name() == "postgresql"
        if self.postgres:
            # psycopg takes libpq URLs; drop SQLAlchemy's "+driver" part.
            self._dsn = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
        else:
            db = Path(parsed.database or "dbos.sqlite")
            self._dir = db.parent / f"{db.name}.executors"
        self._holder: Any = None
        self._stop = threading.Event()
        self._swap = threading.Lock()

    @staticmethod
    def _key(executor: str) -> int:
        # A signed 32-bit number, as the two-key advisory lock functions take.
        value = zlib.crc32(executor.encode("utf-8"))
        return value - (1 << 32) if value >= (1 << 31) else value

    def _path(self, executor: str) -> Path:
        return self._dir / f"{hashlib.sha256(executor.encode()).hexdigest()[:32]}.lock"

    def _connect(self, timeout: int = 10) -> Any:
        import psycopg

        # TCP keepalives and a statement timeout: a half-open connection must fail
        # the keep-alive's check in seconds, not hang it past others' grace.
        return psycopg.connect(
            self._dsn,
            autocommit=True,
            connect_timeout=timeout,
            keepalives=1,
            keepalives_idle=2,
            keepalives_interval=1,
            keepalives_count=2,
            options="-c statement_timeout=3000",
        )

    @property
    def held(self) -> bool:
        """Whether this process holds its lock (see `hold`)."""
        return self._holder is not None

    def hold(self) -> None:
        """Take this process's shared lock, held until it exits.

        Raises `ConfigurationError` when a live process already has this executor id.
        """
        if self.postgres:
            conn = self._connect()
            args = (_LOCK_CLASS, self._key(self.me))
            # Exclusive first: granted only if no live process holds the id.
            row = conn.execute("SELECT pg_try_advisory_lock(%s, %s)", args).fetchone()
            if not (row and row[0]):
                conn.close()
                raise self._taken()
            conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", args)
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", args)
            self._holder = conn
            threading.Thread(
                target=self._keep_alive, name="groundswell-liveness", daemon=True
            ).start()
        else:
            self._dir.mkdir(parents=True, exist_ok=True)
            holder = open(self._path(self.me), "a+")  # noqa: SIM115 - held for life
            with self._probing():
                try:
                    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder.close()
                    raise self._taken() from None
                fcntl.flock(holder, fcntl.LOCK_SH)
            self._holder = holder

    @contextlib.contextmanager
    def _probing(self) -> Iterator[None]:
        """One exclusive try at a time on this SQLite database's liveness files.

        A try holds the file's lock for a moment: another try at the same time
        would take that for a live process (and a starting one for a duplicate id).
        """
        with open(self._dir / "probe.lock", "a+") as mutex:
            fcntl.flock(mutex, fcntl.LOCK_EX)
            yield

    def _taken(self) -> ConfigurationError:
        return ConfigurationError(
            f"executor id {self.me!r} is in use by a live process sharing this database; "
            "give every process its own (leave --executor-id, DBOS__VMID and executor_id "
            "unset to get a unique one)"
        )

    def _keep_alive(self) -> None:
        # The lock lives as long as its connection: a dropped connection (a database
        # restart, a proxy's idle timeout) would make this live process look dead.
        # Check it every second and take the lock again at once; others wait a grace
        # period (TAKEOVER_GRACE_S) before they believe an executor is gone.
        args = (_LOCK_CLASS, self._key(self.me))
        while not self._stop.wait(KEEPALIVE_S):
            try:
                self._holder.execute("SELECT 1")
                continue
            except Exception:
                if self._stop.is_set():
                    return
            logger.warning("liveness lock of executor %s was lost; taking it again", self.me)
            with contextlib.suppress(Exception):
                self._holder.close()
            try:
                # A short timeout: the lock must be back well within others' grace.
                conn = self._connect(timeout=2)
                conn.execute("SELECT pg_advisory_lock_shared(%s, %s)", args)
                with self._swap:
                    if self._stop.is_set():  # released while this connected
                        conn.close()
                        return
                    self._holder = conn
            except Exception as exc:
                logger.warning("could not take the liveness lock again (retrying): %s", exc)

    def release(self) -> None:
        """Let go of the lock (on shutdown)."""
        with self._swap:  # not while the keep-alive puts a new connection in place
            self._stop.set()
            if self._holder is not None:
                if self.postgres:
                    # Unlocked now, not when the server notices the closed connection: a
                    # process restarting at once with the same id must find it free.
                    with contextlib.suppress(Exception):
                        self._holder.execute("SELECT pg_advisory_unlock_all()")
                with contextlib.suppress(Exception):
                    self._holder.close()
                self._holder = None

    def is_dead(self, executor: str) -> bool:
        """True when no live process holds ``executor``'s lock."""
        if executor == self.me:
            return False
        if self.postgres:
            # Look for a holder rather than try the lock: a try holds it for a moment,
            # and a recover() looking at that moment (workers try every few seconds)
            # would take the dead executor for a live one.
            with self._connect() as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                    "AND mode = 'ShareLock' AND classid = %s AND objid::bigint = %s "
                    "AND objsubid = 2 AND database = "
                    "(SELECT oid FROM pg_database WHERE datname = current_database())",
                    (_LOCK_CLASS, self._key(executor) & 0xFFFFFFFF),  # objid is unsigned
                ).fetchone()
                return not (row and row[0])
        path = self._path(executor)
        if not path.exists():
            return True
        with self._probing(), open(path, "a+") as probe:
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            fcntl.flock(probe, fcntl.LOCK_UN)
            return True


_versions_warned: set[str] = set()


def _pending_by_executor(workflow_name: str, only: list[str] | None) -> dict[str, list[Any]]:
    from dbos import DBOS

    pending = DBOS.list_workflows(
        name=workflow_name,
        status=["PENDING", "ENQUEUED"],
        executor_id=only,
        load_input=False,
        load_output=False,
    )
    from dbos._utils import GlobalParams

    owners: dict[str, list[Any]] = {}
    others = set()
    for status in pending:
        if not status.executor_id:
            continue
        if status.app_version and status.app_version != GlobalParams.app_version:
            # DBOS resumes a run only on the application version that started it.
            others.add(status.app_version)
            continue
        owners.setdefault(status.executor_id, []).append(status)
    others -= _versions_warned
    if others:
        _versions_warned.update(others)
        logger.warning(
            "pending durable runs of application version(s) %s are left to processes of "
            "that version (this one is %s)",
            ", ".join(sorted(others)),
            GlobalParams.app_version,
        )
    return owners


def dead_executors(
    workflow_name: str, *, only: list[str] | None = None, grace: float | None = None
) -> dict[str, list[Any]]:
    """Executors that hold pending runs of ``workflow_name`` but no longer live: id → statuses.

    An executor counts as dead when its lock is free now and still free
    ``grace`` seconds later (default `TAKEOVER_GRACE_S`), so a live process that
    is taking its lock again after a dropped connection is not taken for dead.
    """
    owners = _pending_by_executor(workflow_name, only)
    checker = liveness()
    free = [e for e in owners if checker.is_dead(e)]
    wait = TAKEOVER_GRACE_S if grace is None else grace
    if free and wait > 0:
        time.sleep(wait)
        free = [e for e in free if checker.is_dead(e)]
    return {e: owners[e] for e in free}


class Takeover:
    """A worker's periodic check: hands dead executors' pending runs back to their queues.

    An executor is dead once its lock has been free for `TAKEOVER_GRACE_S` (seen
    on successive checks), for the reason `dead_executors` waits.
    """

    def __init__(self, workflow_name: str, grace: float | None = None) -> None:
        self.workflow_name = workflow_name
        self.grace = TAKEOVER_GRACE_S if grace is None else grace
        self._free_since: dict[str, float] = {}

    def check(self) -> dict[str, int]:
        """Returns ``{executor id: runs handed back}``.

        Safe to run in several processes at once: DBOS moves each run back only
        while it still belongs to the dead executor.
        """
        from dbos import DBOS

        owners = _pending_by_executor(self.workflow_name, None)
        checker = liveness()
        now = time.monotonic()
        free = {e for e, runs in owners.items() if checker.is_dead(e)}
        self._free_since = {e: self._free_since.get(e, now) for e in free}
        dead = {
            e: sum(s.status == "PENDING" for s in owners[e])
            for e, since in self._free_since.items()
            if now - since >= self.grace
        }
        dead = {e: n for e, n in dead.items() if n}
        if dead:
            DBOS._recover_pending_workflows(list(dead))
            for executor in dead:
                self._free_since.pop(executor, None)
        return dead
