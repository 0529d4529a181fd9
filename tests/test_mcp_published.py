"""Published MCP servers, unchanged: what their results look like to the model, deadlines, stderr.

Real servers over stdio throughout: ``@modelcontextprotocol/server-everything``
and ``server-filesystem`` from npm, ``mcp-server-time`` from PyPI, and a small
stdio server of our own (``SERVER``) for what no published server does on
demand: a call that never returns (it writes to a file when the cancellation
reaches it), a result of structured content alone, the ``_meta`` a call
carried. The model is the fake Anthropic API, spoken to by the real client;
what it received is read back from its requests.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import groundswell_otel
import pytest
from anthropic.types import ToolResultBlockParam
from groundswell_otel import attributes as A
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from pydantic import TypeAdapter

import groundswell
from groundswell import Agent, ConfigurationError, ToolError
from groundswell.mcp.config import CALL_TIMEOUT
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_use

from .published_mcp import ROOT, npm_server, pypi_server

# A 1x1 PNG, and the same pixel as a JPEG's first bytes would not be: the bytes decide the type.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)

SERVER = """
import asyncio, json, os, sys, time
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import BlobResourceContents, CallToolResult, EmbeddedResource, ImageContent

LOG = os.environ["SERVER_LOG"]


def note(line):
    with open(LOG, "a") as log:
        log.write(line + "\\n")


note(f"up {os.getpid()}")
print(f"own server {os.getpid()} says hello on stderr", file=sys.stderr, flush=True)
server = MCPServer("own", log_level="WARNING")


@server.tool()
async def wait_forever() -> str:
    \"\"\"Never answers.\"\"\"
    note("called")
    try:
        await asyncio.sleep(3600)
    except asyncio.CancelledError:
        note("cancelled")
        raise
    return "never"


@server.tool()
def block_forever() -> str:
    \"\"\"Never answers, and cannot be cancelled (a blocking call).\"\"\"
    note("blocking")
    time.sleep(3600)
    return "never"


@server.tool()
def meta(ctx: Context) -> str:
    \"\"\"The trace context the call carried in params._meta.\"\"\"
    carried = ctx.request_context.meta or {}
    return json.dumps({k: carried.get(k) for k in ("traceparent", "tracestate")})


@server.tool()
def stats() -> CallToolResult:
    \"\"\"Structured content and nothing else.\"\"\"
    return CallToolResult(content=[], structured_content={"rows": 3, "columns": ["a", "b"]})


@server.tool()
def pictures() -> CallToolResult:
    \"\"\"An SVG (no API image type) and a PDF resource.\"\"\"
    svg = ImageContent(type="image", data="PHN2Zy8+", mime_type="image/svg+xml")
    pdf = BlobResourceContents(
        uri="file:///report.pdf", mime_type="application/pdf", blob="JVBERi0xLjQKJcTl8uXr"
    )
    return CallToolResult(content=[svg, EmbeddedResource(type="resource", resource=pdf)])


@server.tool()
def wrapped() -> CallToolResult:
    \"\"\"A PNG and a PDF whose base64 is wrapped in lines (MIME style).\"\"\"
    png = ImageContent(type="image", data=os.environ["WRAPPED_PNG"], mime_type="image/png")
    pdf = BlobResourceContents(
        uri="file:///wrapped.pdf", mime_type="application/pdf", blob="JVBERi0x\\nLjQKJcTl\\r\\n8uXr"
    )
    return CallToolResult(content=[png, EmbeddedResource(type="resource", resource=pdf)])


server.run()
"""

# What a server's output would look like on the terminal: its stderr, its logs, ours of it.
SERVER_OUTPUT = ("MCP server", "Processing request", "Starting default", "running on stdio")


class Own:
    """Our stdio server: its config, and the lines it wrote to its log."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        script = tmp_path / "own_server.py"
        script.write_text(SERVER)
        self.log = tmp_path / "own.log"
        self.config = {
            "name": "own",
            "command": sys.executable,
            "args": [str(script)],
            "env": {"SERVER_LOG": str(self.log)},
            **config,
        }

    @property
    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    @property
    def pid(self) -> int:
        (up,) = [line for line in self.lines if line.startswith("up ")]
        return int(up.split()[1])

    async def wait_for(self, line: str, seconds: float = 5.0) -> bool:
        # Asleep, not blocking: the cancellation goes out from a task of the event loop.
        deadline = time.monotonic() + seconds
        while line not in self.lines:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


def call_then_answer(tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """A model that calls ``tool`` once, then answers "done"."""

    def model(request: MessagesRequest) -> Reply:
        if request.tool_results():
            return text("done")
        return tool_use(tool, arguments or {})

    return model


async def ask(
    config: dict[str, Any], tool: str, arguments: dict[str, Any] | None = None, **agent: Any
) -> tuple[Any, FakeAnthropicAPI]:
    fake = FakeAnthropicAPI(call_then_answer(tool, arguments))
    result = await Agent(name="a", mcps=[config], client=fake.client(), **agent).run("go")
    return result, fake


def sent_content(fake: FakeAnthropicAPI) -> Any:
    """The content of the tool result the model received, checked against the SDK's types."""
    (block,) = fake.requests[1].latest_tool_results()
    TypeAdapter(ToolResultBlockParam).validate_python(block)
    return block["content"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


# -- what the model sees --------------------------------------------------------------------


async def test_server_everything_get_tiny_image_reaches_the_model_as_an_image_block() -> None:
    result, fake = await ask(npm_server("everything"), "mcp__everything__get-tiny-image")
    content = sent_content(fake)
    (image,) = [b["source"] for b in content if b["type"] == "image"]
    assert image["type"] == "base64" and image["media_type"] == "image/png"
    assert base64.b64decode(image["data"]).startswith(b"\x89PNG")
    # The model pays for pixels, not for base64 as text; the tree keeps a note of its size.
    assert all(image["data"] not in b["text"] for b in content if b["type"] == "text")
    (call,) = result.tree.find(type="mcp_call")
    (recorded,) = [b["source"] for b in call.payload["output"] if b["type"] == "image"]
    assert recorded["media_type"] == "image/png"
    assert (
        recorded["data"].startswith("[") and "bytes of image/png, not recorded]" in recorded["data"]
    )
    assert image["data"] not in json.dumps(result.tree.to_json())


async def test_server_filesystem_read_media_file_gives_an_image_block_and_a_note_for_audio(
    tmp_path: Path,
) -> None:
    (tmp_path / "pixel.png").write_bytes(PNG)
    (tmp_path / "beep.wav").write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(24))
    files = npm_server("filesystem", str(tmp_path))
    _, fake = await ask(
        files, "mcp__filesystem__read_media_file", {"path": str(tmp_path / "pixel.png")}
    )
    # Its structuredContent only repeats the image: no base64 as JSON text beside it.
    assert sent_content(fake) == [
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/png",
                "data": base64.b64encode(PNG).decode(),
            },
        }
    ]
    _, fake = await ask(
        files, "mcp__filesystem__read_media_file", {"path": str(tmp_path / "beep.wav")}
    )
    assert sent_content(fake) == "[audio/wav audio, 40 bytes: not shown, the API takes no audio]"


async def test_embedded_resources_reach_the_model_as_documents() -> None:
    everything = npm_server("everything")
    tool = "mcp__everything__get-resource-reference"
    _, fake = await ask(everything, tool, {"resourceType": "Text", "resourceId": 1})
    content = sent_content(fake)
    (document,) = [b for b in content if b["type"] == "document"]
    assert document["title"] == "demo://resource/dynamic/text/1"
    assert document["source"]["type"] == "text"
    assert document["source"]["data"].startswith("Resource 1: This is a plaintext resource")
    # A blob of text/plain is decoded: the model reads text, never base64.
    _, fake = await ask(everything, tool, {"resourceType": "Blob", "resourceId": 2})
    (document,) = [b for b in sent_content(fake) if b["type"] == "document"]
    assert document["source"]["data"].startswith("Resource 2: This is a base64 blob")


async def test_resource_links_are_named_for_the_model() -> None:
    _, fake = await ask(
        npm_server("everything"), "mcp__everything__get-resource-links", {"count": 2}
    )
    content = sent_content(fake)
    assert isinstance(content, str)  # links are text: the API has no block for a bare link
    assert (
        "Resource link: Text Resource 2 <demo://resource/dynamic/text/2> (text/plain): "
        "Resource 2: plaintext resource"
    ) in content


async def test_a_pdf_resource_is_a_document_and_an_image_type_the_api_lacks_is_a_note(
    tmp_path: Path,
) -> None:
    own = Own(tmp_path)
    _, fake = await ask(own.config, "mcp__own__pictures")
    note, pdf = sent_content(fake)
    assert note == {
        "type": "text",
        "text": "[image (image/svg+xml, 6 bytes): not shown, the API takes JPEG, PNG, GIF "
        "and WebP images only]",
    }
    assert pdf == {
        "type": "document",
        "source": {
            "type": "base64",
            "media_type": "application/pdf",
            "data": "JVBERi0xLjQKJcTl8uXr",
        },
        "title": "file:///report.pdf",
    }


async def test_line_wrapped_base64_reaches_the_model_without_its_whitespace(
    tmp_path: Path,
) -> None:
    png = base64.b64encode(PNG).decode()
    lines = "\n".join(png[i : i + 16] for i in range(0, len(png), 16))
    own = Own(tmp_path)
    own.config["env"]["WRAPPED_PNG"] = lines
    _, fake = await ask(own.config, "mcp__own__wrapped")
    image, pdf = sent_content(fake)
    # The API refuses base64 with line breaks: the model gets the same bytes, unwrapped.
    assert image["source"] == {"type": "base64", "media_type": "image/png", "data": png}
    assert pdf["source"]["data"] == "JVBERi0xLjQKJcTl8uXr"


async def test_structured_content_reaches_the_model_and_the_tree(tmp_path: Path) -> None:
    # server-everything also sends it as JSON text, as the MCP spec asks: sent once.
    result, fake = await ask(
        npm_server("everything"), "mcp__everything__get-structured-content", {"location": "Chicago"}
    )
    (call,) = result.tree.find(type="mcp_call")
    structured = call.payload["structured_content"]
    assert set(structured) == {"temperature", "conditions", "humidity"}
    assert json.loads(sent_content(fake)) == structured
    # A server that sends structured content alone: the model gets its JSON.
    result, fake = await ask(Own(tmp_path).config, "mcp__own__stats")
    assert json.loads(sent_content(fake)) == {"rows": 3, "columns": ["a", "b"]}
    (call,) = result.tree.find(type="mcp_call")
    assert call.payload["structured_content"] == {"rows": 3, "columns": ["a", "b"]}


async def test_mcp_server_time_answers_as_text_with_its_node_naming_the_server() -> None:
    result, fake = await ask(
        pypi_server("mcp_server_time"), "mcp__time__get_current_time", {"timezone": "UTC"}
    )
    assert json.loads(sent_content(fake))["timezone"] == "UTC"
    (call,) = result.tree.find(type="mcp_call")
    assert call.payload["mcp"] == {
        "server": "time",
        "tool": "get_current_time",
        "transport": "stdio",
        "call_timeout_s": CALL_TIMEOUT,
        "protocol_version": call.payload["mcp"]["protocol_version"],
    }


# -- deadlines ------------------------------------------------------------------------------


async def test_a_call_that_never_returns_ends_at_its_call_timeout_and_is_cancelled_on_the_server(
    tmp_path: Path,
) -> None:
    own = Own(tmp_path, call_timeout=1.5)
    fake = FakeAnthropicAPI(call_then_answer("mcp__own__wait_forever"))
    agent = Agent(name="a", mcps=[own.config], client=fake.client())
    async with agent:  # the server outlives the prompt: what it saw is read while it runs
        result = await agent.run("go")
        (call,) = result.tree.find(type="mcp_call")
        assert 1.5 <= call.ended_at - call.timestamp < 2.0
        assert await own.wait_for("cancelled"), own.lines  # notifications/cancelled reached it
        assert alive(own.pid)
    message = sent_content(fake)
    assert message == (
        "MCP server 'own' did not answer 'wait_forever' within 1.5 s (its call_timeout); the "
        "call was cancelled on the server. If the tool needs longer, raise 'call_timeout' "
        "(seconds) in the config of MCP server 'own'"
    )
    assert call.status.value == "failed" and call.events[-1]["type"] == "call_timeout"
    assert result.output == "done"  # the model was told, and the prompt went on


async def test_the_smaller_of_tool_timeout_and_call_timeout_wins(tmp_path: Path) -> None:
    own = Own(tmp_path)  # call_timeout: the default, 60 s
    started = time.monotonic()
    result, fake = await ask(own.config, "mcp__own__wait_forever", tool_timeout=1)
    (call,) = result.tree.find(type="mcp_call")
    assert 1.0 <= call.ended_at - call.timestamp < 1.5
    assert "did not finish within 1 s" in sent_content(fake)
    # The prompt ends with the call (its server stopped at once), not seconds after it.
    assert time.time() - call.ended_at < 0.5
    assert time.monotonic() - started < 30
    assert await gone_within(own.pid, 0.5)


async def test_in_process_servers_take_the_default_deadline_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp.server.mcpserver import MCPServer

    slow = MCPServer("slow")
    seen: list[str] = []

    @slow.tool()
    async def think() -> str:
        """Thinks forever."""
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        return "never"

    monkeypatch.setenv("GROUNDSWELL_MCP_CALL_TIMEOUT", "0.5")
    result, fake = await ask(slow, "mcp__slow__think")
    (call,) = result.tree.find(type="mcp_call")
    assert 0.5 <= call.ended_at - call.timestamp < 1.0
    assert sent_content(fake).endswith(
        "If the tool needs longer, set GROUNDSWELL_MCP_CALL_TIMEOUT (seconds) for in-process "
        "servers"
    )
    assert seen == ["cancelled"]
    assert call.payload["mcp"]["transport"] == "in_process"


@pytest.mark.slow
async def test_a_server_blocking_in_a_call_and_ignoring_sigterm_leaves_no_process(
    tmp_path: Path,
) -> None:
    script = tmp_path / "stubborn.py"
    script.write_text(
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        + "exec(open("
        + repr(str(tmp_path / "own_server.py"))
        + ").read())\n"
    )
    own = Own(tmp_path, call_timeout=1)
    own.config["args"] = [str(script)]
    result, _ = await ask(own.config, "mcp__own__block_forever")
    (call,) = result.tree.find(type="mcp_call")
    assert time.time() - call.ended_at < 0.5  # the prompt did not wait for the server to exit
    assert await gone_within(own.pid, 3.0)  # SIGKILL followed the ignored SIGTERM


async def test_a_start_timeout_fails_within_half_a_second_of_its_deadline() -> None:
    silent = {
        "name": "silent",
        "command": sys.executable,
        "args": ["-c", "import os, sys, time; print(os.getpid(), file=sys.stderr); time.sleep(60)"],
        "timeout": 2,
    }
    agent = Agent(name="a", mcps=[silent], client=FakeAnthropicAPI([text("x")]).client())
    started = time.monotonic()
    with pytest.raises(ToolError) as info:
        await agent.run("x")
    assert 2.0 <= time.monotonic() - started < 2.5
    head, _, pid = str(info.value).partition("its stderr ended with:\n")
    assert head.startswith("MCP server 'silent' did not answer within 2.0s")
    assert "raise 'timeout' (seconds) in the config of MCP server 'silent'" in head
    assert not alive(int(pid))


async def test_a_caller_cancelled_as_its_server_stops_stays_cancelled() -> None:
    from mcp.server.mcpserver import MCPServer

    from groundswell.mcp.bridge import MCPBridge, MCPConnection

    (server,) = MCPBridge([MCPServer("quiet")], {}).local
    connection = MCPConnection(server)
    await connection.wait()
    closing = asyncio.ensure_future(connection.close())
    # The caller is cancelled in the very step its server's task ends: the close must not
    # swallow that cancellation (a prompt told to stop would otherwise carry on).
    connection._task.add_done_callback(lambda _: closing.cancel())
    with pytest.raises(asyncio.CancelledError):
        await closing
    assert not connection.alive


def test_call_timeout_is_checked_when_the_agent_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match="'call_timeout' must be seconds > 0, got 0"):
        Agent(name="a", mcps=[{**pypi_server("mcp_server_time"), "call_timeout": 0}])
    with pytest.raises(ConfigurationError, match="unknown key 'call_timeout'"):
        Agent(name="a", mcps=[{"type": "url", "name": "r", "url": "https://x", "call_timeout": 5}])
    monkeypatch.setenv("GROUNDSWELL_MCP_CALL_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="GROUNDSWELL_MCP_CALL_TIMEOUT must be seconds"):
        Agent(name="a", mcps=[pypi_server("mcp_server_time")])


# -- OpenTelemetry --------------------------------------------------------------------------


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    monkeypatch.delenv(groundswell_otel.CONTENT_ENV, raising=False)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    groundswell_otel.instrument(provider)
    yield memory
    groundswell_otel.uninstrument()


async def test_mcp_call_spans_follow_the_mcp_conventions_and_the_server_gets_trace_context(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    result, fake = await ask(Own(tmp_path).config, "mcp__own__meta")
    assert groundswell.flush_sinks()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "tools/call meta"]
    attributes = dict(span.attributes or {})
    assert span.kind is SpanKind.CLIENT
    assert attributes[A.MCP_METHOD_NAME] == "tools/call"
    assert attributes[A.GEN_AI_TOOL_NAME] == "meta"
    assert attributes[A.TOOL_NAME] == "mcp__own__meta"
    assert attributes[A.NETWORK_TRANSPORT] == "pipe"
    assert attributes[A.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert attributes[A.MCP_PROTOCOL_VERSION]
    assert A.MCP_SESSION_ID not in attributes  # stdio has no session id
    # params._meta carried the W3C traceparent of this very span.
    carried = json.loads(sent_content(fake))
    _, trace_id, span_id, _ = carried["traceparent"].split("-")
    assert int(trace_id, 16) == span.context.trace_id
    assert int(span_id, 16) == span.context.span_id
    (call,) = result.tree.find(type="mcp_call")
    assert attributes[A.NODE_ID] == call.id


# -- stderr ---------------------------------------------------------------------------------


@pytest.mark.slow
def test_server_stderr_and_mcp_logs_never_reach_the_terminal(tmp_path: Path) -> None:
    # An in-process MCPServer makes mcp install a root handler at INFO; the stdio
    # server's stderr lines are logged at DEBUG, so they stay off the terminal.
    Own(tmp_path)  # writes own_server.py
    script = tmp_path / "app.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio, sys
            from mcp.server.mcpserver import MCPServer
            from groundswell import Agent
            from groundswell.testing import FakeAnthropicAPI, text, tool_calls

            notes = MCPServer("notes")


            @notes.tool()
            def count() -> int:
                \"\"\"How many notes there are.\"\"\"
                return 3


            own = {{"name": "own", "command": sys.executable,
                    "args": [{str(tmp_path / "own_server.py")!r}],
                    "env": {{"SERVER_LOG": {str(tmp_path / "own.log")!r}}}}}
            fake = FakeAnthropicAPI([
                tool_calls(("mcp__notes__count", {{}}), ("mcp__own__stats", {{}})), text("done"),
            ])
            agent = Agent(name="a", mcps=[notes, own], client=fake.client())
            result = asyncio.run(agent.run("go"))
            print(result.output)
            (start,) = result.tree.find(type="mcp_connect", name="own")
            print(start.payload["output"]["stderr"][0])  # what the server wrote to its stderr
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    done, said = out.stdout.splitlines()
    assert done == "done" and said.endswith("says hello on stderr")  # it did write to stderr
    # Nothing of the servers' own: their stderr, their logs, Groundswell's record of them.
    for marker in ("says hello", *SERVER_OUTPUT):
        assert marker not in out.stderr


@pytest.mark.slow
def test_the_mcp_example_prints_no_server_output() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "GROUNDSWELL_"))}
    example = ROOT / "examples" / "08_tools_mcp_hooks_skills.py"
    out = subprocess.run(
        [sys.executable, str(example)],
        cwd=example.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    assert not any(marker in out.stdout for marker in SERVER_OUTPUT)


@pytest.mark.slow
@pytest.mark.parametrize("page", ["tools.md", "observability.md"])
def test_the_doc_pages_using_mcp_servers_print_no_server_output(page: str, tmp_path: Path) -> None:
    from .test_docs import page_env, run_page

    # The pages bring their own fake (a reader's environment has none behind a URL).
    out = run_page(ROOT / "docs" / page, page_env(tmp_path), tmp_path)
    assert out.returncode == 0, out.stderr
    assert not any(marker in out.stdout + out.stderr for marker in SERVER_OUTPUT), out.stderr


@pytest.mark.slow
def test_a_timed_out_call_leaves_no_server_process_behind_when_the_program_ends(
    tmp_path: Path,
) -> None:
    own = Own(tmp_path, call_timeout=0.5)
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from groundswell import Agent
            from groundswell.testing import FakeAnthropicAPI, text, tool_use

            fake = FakeAnthropicAPI([tool_use("mcp__own__block_forever", {{}}), text("done")])
            agent = Agent(name="a", mcps=[{own.config!r}], client=fake.client())
            print(asyncio.run(agent.run("go")).output)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    assert "blocking" in own.lines
    assert asyncio.run(gone_within(own.pid, 2.0))
    if alive(own.pid):  # pragma: no cover - only when the test fails
        os.kill(own.pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_server_ignoring_sigterm_is_killed_when_the_program_ends_before_its_sigkill(
    tmp_path: Path,
) -> None:
    own = Own(tmp_path, call_timeout=0.5)
    stubborn = tmp_path / "stubborn.py"
    stubborn.write_text(
        "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"exec(open({str(tmp_path / 'own_server.py')!r}).read())\n"
    )
    own.config["args"] = [str(stubborn)]
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import asyncio
            from groundswell import Agent
            from groundswell.mcp import calls as mcp_calls
            from groundswell.testing import FakeAnthropicAPI, text, tool_use

            # The SIGKILL timer would fire long after this program has ended.
            mcp_calls.KILL_AFTER = 600
            fake = FakeAnthropicAPI([tool_use("mcp__own__block_forever", {{}}), text("done")])
            agent = Agent(name="a", mcps=[{own.config!r}], client=fake.client())
            # The program ends as soon as it has its answer: the server's shutdown, left to
            # the background, is not waited for.
            loop = asyncio.new_event_loop()
            print(loop.run_until_complete(agent.run("go")).output, flush=True)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout == "done\n", out.stderr
    assert "blocking" in own.lines
    try:
        assert asyncio.run(gone_within(own.pid, 2.0))  # killed at exit, not left running
    finally:
        if alive(own.pid):  # pragma: no cover - only when the test fails
            os.kill(own.pid, signal.SIGKILL)
