"""Where people answer, from a terminal: ``groundswell pending``, ``approve``, ``reject``
and ``answer`` (through ``main()`` and as real processes) against a real server in this
process, the URL schemes they reach, and ``groundswell serve``."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from groundswell_history import HistoryStore, serve_app, serving

import groundswell
from groundswell.cli import main
from groundswell.waits import Answered, Wait
from groundswell.waits import client as waits_client
from groundswell.waits.client import (
    HTTPWaits,
    WaitsClient,
    WaitsServerError,
    connect,
    register_scheme,
)

from .test_history_api import SECRET, Server
from .test_waits_http import ADA, ALICE, BOB, OPERATOR, gated, open_waits, release

CLI = (sys.executable, "-m", "groundswell.cli")


# Every test here ends with no wait of its own left open (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("no_wait_left_open")


@pytest.fixture
async def url() -> AsyncIterator[str]:
    """Where the waits of this process are served, by ``serving()`` on a free port."""
    async with serving(port=0, secret=SECRET) as running:
        yield running.url


def test_connect_chooses_a_backend_by_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROUNDSWELL_SERVE_URL", "http://127.0.0.1:1/prefix")
    client = connect()
    assert isinstance(client, HTTPWaits) and client.url == "http://127.0.0.1:1/prefix"
    client.close()
    with pytest.raises(groundswell.ConfigurationError, match=r"no waits backend answers ftp://"):
        connect("ftp://localhost/waits")
    with pytest.raises(groundswell.ConfigurationError, match="with its scheme"):
        connect("127.0.0.1:8765")
    with pytest.raises(WaitsServerError, match="cannot reach a waits server") as unreachable:
        connect(f"http://127.0.0.1:{free_port()}").pending()
    assert "groundswell_history.serving()" in str(unreachable.value)


class InProcess:
    """The waits of this very process as a `WaitsClient`: the shape of a backend a
    plugin registers for its scheme."""

    def __init__(self, url: str, token: str | None) -> None:
        self.url = url

    def pending(
        self, *, kind: str | None = None, agent: str | None = None, run_id: str | None = None
    ) -> list[Wait]:
        return [w for w in groundswell.waits.pending() if kind in (None, w.kind)]

    def approve(
        self, wait_id: str, *, input: dict[str, Any] | None = None, by: str | None = None
    ) -> Answered:
        return groundswell.waits.approve(wait_id, input=input, by=by)

    def reject(self, wait_id: str, reason: str, *, by: str | None = None) -> Answered:
        return groundswell.waits.reject(wait_id, reason, by=by)

    def answer(self, wait_id: str, value: Any, *, by: str | None = None) -> Answered:
        return groundswell.waits.answer(wait_id, value, by=by)

    def close(self) -> None:
        pass


async def test_a_registered_scheme_answers_the_commands(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(waits_client, "_schemes", dict(waits_client._schemes))  # undone after
    register_scheme("inproc", InProcess)
    assert isinstance(connect("inproc://here"), WaitsClient)
    run = asyncio.create_task(gated.run("alice", "delete_file"))
    (wait,) = await open_waits(1)
    assert await cli("pending", "--url", "inproc://here", "--json") == 0
    assert json.loads(capsys.readouterr().out) == [wait.to_dict()]
    assert await cli("approve", wait.id, "--url", "inproc://here", "--by", "lin") == 0
    assert (await run).output["kind"] == "approve"
    with pytest.raises(groundswell.ConfigurationError, match="a URL scheme is a word"):
        register_scheme("inproc://", InProcess)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def cli(*args: str) -> int:
    return await asyncio.to_thread(main, list(args))


async def test_the_commands_list_and_decide_waits(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GROUNDSWELL_SERVE_URL", url)
    monkeypatch.setenv("GROUNDSWELL_TOKEN", OPERATOR)
    runs = [
        asyncio.create_task(gated.run("alice", "delete_file")),
        asyncio.create_task(gated.run("bob", "send_mail")),
        asyncio.create_task(release.run("cli")),
    ]
    await open_waits(3)
    (alices,) = await open_waits(1, agent="alice")
    (bobs,) = await open_waits(1, agent="bob")
    (question,) = await open_waits(1, kind="question")

    assert await cli("pending") == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["ID", "KIND", "AGENT", "WAITING", "FOR", "OPENED", "DEADLINE"]
    rows = {line.split()[0]: line for line in table[1:]}
    assert set(rows) == {alices.id, bobs.id, question.id}
    assert rows[alices.id].split()[1:4] == ["approval", "alice", "delete_file"]
    assert '{"path":"alice.txt"}' in rows[alices.id]
    assert "Which version of cli?" in rows[question.id] and " ago " in rows[question.id]

    assert (
        await cli("pending", "--json", "--kind", "approval", "--token", ALICE["Authorization"][7:])
        == 0
    )
    assert json.loads(capsys.readouterr().out) == [alices.to_dict()]

    assert await cli("approve", alices.id, "--input", '{"path": "y.txt"}', "--by", "ana") == 0
    assert capsys.readouterr().out.strip() == (
        f'approved wait {alices.id} (delete_file {{"path":"alice.txt"}}), by operator:ada for ana'
    )
    assert await cli("reject", bobs.id, "--reason", "no mail on Sundays") == 0
    assert capsys.readouterr().out.startswith(f"rejected wait {bobs.id} (send_mail")

    # Clear one-line errors, exit code 2: bad JSON names the flag, a refused answer says why.
    assert await cli("answer", question.id, "--json", "{version: 5}") == 2
    err = capsys.readouterr().err
    assert err.startswith("groundswell: --json is not valid JSON (Expecting property name")
    assert await cli("approve", question.id, "--input", "[1]") == 2
    assert "--input must be a JSON object" in capsys.readouterr().err
    assert await cli("answer", question.id, "--text", "five") == 2
    assert "does not fit" in capsys.readouterr().err
    assert await cli("approve", alices.id) == 2
    assert "is closed already (approved by operator:ada for ana)" in capsys.readouterr().err
    assert await cli("answer", question.id, "--json", '{"version": "5", "notes": "cli"}') == 0
    assert capsys.readouterr().out.startswith(f"answered wait {question.id}")

    assert await cli("pending") == 0
    assert capsys.readouterr().out.strip() == f"no open waits at {url}"
    outputs = [(await r).output for r in runs]
    assert outputs == [
        {"kind": "approve", "input": {"path": "y.txt"}, "reason": None},
        {"kind": "reject", "input": None, "reason": "no mail on Sundays"},
        "released cli 5: cli",
    ]

    # No token; a scheme nobody serves; no server there.
    monkeypatch.delenv("GROUNDSWELL_TOKEN")
    assert await cli("pending") == 2
    assert "refused the request (401)" in capsys.readouterr().err
    assert await cli("pending", "--url", "ftp://localhost/x") == 2
    assert "no waits backend answers ftp://" in capsys.readouterr().err
    assert await cli("pending", "--url", f"http://127.0.0.1:{free_port()}") == 2
    assert "start groundswell_history.serving() there" in capsys.readouterr().err


async def test_credentials_in_the_server_url_never_reach_the_messages(
    url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    password, key = "Sup3rS3cretPassw0rd", "sk-ant-api03-" + "a" * 40
    port = free_port()
    assert await cli("pending", "--url", f"http://admin:{password}@127.0.0.1:{port}/") == 2
    err = capsys.readouterr().err
    assert "cannot reach a waits server at http://admin:" in err and password not in err
    monkeypatch.setenv("GROUNDSWELL_SERVE_URL", f"http://127.0.0.1:{port}/?api_key={key}")
    assert await cli("pending") == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}/?api_key=" in err and key not in err
    assert await cli("pending", "--url", f"admin:{password}@127.0.0.1:{port}") == 2  # no scheme
    err = capsys.readouterr().err
    assert "with its scheme" in err and f"@127.0.0.1:{port}" in err and password not in err
    # A server that refuses: the message and the error's url are masked alike.
    with_password = url.replace("http://", f"http://admin:{password}@")
    with HTTPWaits(with_password) as client, pytest.raises(WaitsServerError) as refused:
        await asyncio.to_thread(client.pending)
    assert refused.value.status == 401 and "refused the request" in str(refused.value)
    assert password not in str(refused.value) and password not in refused.value.url
    # A plugin's scheme too: what the command prints masks it.
    monkeypatch.setattr(waits_client, "_schemes", dict(waits_client._schemes))  # undone after
    register_scheme("inproc", InProcess)
    assert await cli("pending", "--url", f"inproc://admin:{password}@here") == 0
    out = capsys.readouterr().out
    assert out.startswith("no open waits at inproc://admin:") and password not in out


async def test_the_commands_run_as_a_process_against_a_mounted_app(tmp_path: Path) -> None:
    """``groundswell pending`` as a real process, against the waits app mounted under a
    prefix of someone else's app, served by a plain uvicorn server."""
    outer = FastAPI()
    outer.mount("/gs", serve_app(secret=SECRET))
    with Server(outer) as server:
        run = asyncio.create_task(gated.run("alice", "delete_file"))
        (wait,) = await open_waits(1)
        env = {**os.environ, "GROUNDSWELL_TOKEN": ALICE["Authorization"][7:]}
        env["GROUNDSWELL_SERVE_URL"] = f"{server.url}/gs"
        listed = await asyncio.to_thread(
            subprocess.run, [*CLI, "pending", "--json"], env=env, capture_output=True, text=True
        )
        assert listed.returncode == 0, listed.stderr
        assert [w["id"] for w in json.loads(listed.stdout)] == [wait.id]
        rejected = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "reject", wait.id, "--reason", "too risky"],
            env=env,
            capture_output=True,
            text=True,
        )
        assert rejected.returncode == 0, rejected.stderr
        assert (await run).output["reason"] == "too risky"
        wrong = await asyncio.to_thread(
            subprocess.run,
            [*CLI, "pending", "--url", server.url],  # not where the app is mounted
            env=env,
            capture_output=True,
            text=True,
        )
        assert wrong.returncode == 2 and "serves no waits API" in wrong.stderr


def wait_for_server(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert process.poll() is None, "groundswell serve exited"
        assert time.monotonic() < deadline, "groundswell serve did not start"
        try:
            httpx2.get(f"{url}/api/health", timeout=1)
            return
        except httpx2.TransportError:
            time.sleep(0.05)


@pytest.mark.slow
def test_groundswell_serve_serves_waits_and_history(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUNDSWELL_")}
    env.update(GROUNDSWELL_HOME=str(tmp_path), GROUNDSWELL_HISTORY_SECRET=SECRET.decode())
    # No store yet: the waits API alone.
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen([*CLI, "serve", "--port", str(port)], env=env, stderr=log)
    try:
        wait_for_server(url, server)
        assert httpx2.get(f"{url}/api/health").json()["history"] is False
        assert httpx2.get(f"{url}/api/waits", headers=ADA).json() == {"count": 0, "waits": []}
        assert httpx2.get(f"{url}/api/waits").status_code == 401
        assert httpx2.get(f"{url}/api/sessions", headers=ADA).status_code == 404
        taken = subprocess.run(
            [*CLI, "serve", "--port", str(port)], env=env, capture_output=True, text=True
        )
        assert taken.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in taken.stderr
    finally:
        server.terminate()
        server.wait(10)
        log.close()
    assert "no history API (no store yet" in (tmp_path / "serve.log").read_text()

    # With a store: the history API too, on the same app and tokens.
    store_url = f"sqlite:///{tmp_path / 'h.db'}"
    store = HistoryStore(store_url)
    store.start_session("s-1", "alice")
    store.close()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*CLI, "serve", "--url", store_url, "--port", str(port)],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_server(url, server)
        sessions = httpx2.get(f"{url}/api/sessions", headers=ALICE).json()["sessions"]
        assert [s["session_id"] for s in sessions] == ["s-1"]
        assert httpx2.get(f"{url}/api/sessions", headers=BOB).json()["sessions"] == []
        assert httpx2.get(f"{url}/api/waits", headers=BOB).json()["count"] == 0
        assert httpx2.get(f"{url}/api/health").json()["status"] == "ok"
    finally:
        server.terminate()
        server.wait(10)
    missing = subprocess.run(
        [*CLI, "serve", "--url", f"sqlite:///{tmp_path / 'nope.db'}"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "no history store at" in missing.stderr


def test_serving_refuses_a_taken_port_and_a_wrong_history() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            groundswell.ConfigurationError, match=f"cannot listen on 127.0.0.1:{port}"
        ):
            serving(port=port, secret=SECRET).start()
    with pytest.raises(groundswell.ConfigurationError, match=r"history=\.\.\."):
        serve_app(3, secret=SECRET)
