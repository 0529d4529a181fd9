"""Executor liveness locks, looked at by many processes at once.

Workers look for dead executors every few seconds, and ``recover()`` looks
whenever it is called: a look must never make a dead executor seem alive to
another one looking at the same moment, nor refuse a process starting with
the id being looked at. Each looker is a thread with a `Liveness` of its own
(a connection of its own, as another process would have).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from groundswell_dbos._runtime import Liveness

from .scratch_db import fresh_database


@pytest.fixture(params=["postgresql", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runs.sqlite'}"
        return
    with fresh_database(request.getfixturevalue("postgres_url")) as made:
        yield made


def looking(url: str, executor: str, rounds: int, check: Callable[[], None]) -> list[bool]:
    """``check()`` ``rounds`` times while two other lookers look at ``executor`` without
    pause; what the lookers saw (is_dead)."""
    stop = threading.Event()
    seen: list[bool] = []

    def look(me: str) -> None:
        checker = Liveness(url, me)
        while not stop.is_set():
            seen.append(checker.is_dead(executor))

    threads = [threading.Thread(target=look, args=(f"looker-{i}",)) for i in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(rounds):
            check()
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    return seen


def test_a_dead_executor_is_dead_to_everyone_looking_at_once(url: str) -> None:
    gone = Liveness(url, "gone")
    gone.hold()
    gone.release()  # as its process dying would
    me = Liveness(url, "recovering")
    mine: list[bool] = []

    seen = looking(url, "gone", 200, lambda: mine.append(me.is_dead("gone")))

    assert mine == [True] * 200
    assert seen and all(seen)


def test_a_live_executor_is_alive_to_everyone_looking_at_once(url: str) -> None:
    live = Liveness(url, "live")
    live.hold()
    me = Liveness(url, "recovering")
    mine: list[bool] = []
    try:
        seen = looking(url, "live", 100, lambda: mine.append(me.is_dead("live")))
    finally:
        live.release()
    assert mine == [False] * 100
    assert seen and not any(seen)


def test_a_process_may_start_with_the_id_of_a_dead_executor_others_look_at(url: str) -> None:
    # A worker restarted with its --executor-id after a crash, while others look for
    # dead executors: refused only when a live process has the id.
    def restart() -> None:
        again = Liveness(url, "restarted")
        again.hold()
        again.release()

    looking(url, "restarted", 50, restart)
