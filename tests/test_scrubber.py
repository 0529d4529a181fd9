"""One scrubber for every output: secret shapes vanish, look-alikes survive, everywhere.

One real run (real ``anthropic`` client against the fake API, tools that echo
and fail, ``SecretStr`` state, an agent ``env``, a registered secret, a secret
environment variable) is recorded by every output at once: the tree's JSON,
``tree.save``, the JSONL sink, the OpenTelemetry sink with content capture, the
span exporter wrapper, the SQLite history store (rows read raw), and the
history API's 422 body and logs behind a real uvicorn server, the log records
of the run (a real stdio MCP server, started with secrets in its ``args``,
echoes its command line to its stderr), and ``groundswell run``'s ``--jsonl``,
``--json`` and ``--save`` outputs of a workflow holding every case in its input
and state. Each row of the tables below is then checked against each output.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import groundswell_otel
import httpx2
import pytest
import uvicorn
from groundswell_history import HistoryStore, create_app, set_task
from groundswell_history.api import issue_token
from groundswell_jsonl import TRACE_DIR_ENV
from groundswell_otel import RedactingSpanExporter
from groundswell_otel import attributes as A
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic import BaseModel, SecretStr

import groundswell
from groundswell import Agent, EventTree, WorkflowContext, is_secret_key, redact, scrub, workflow
from groundswell.testing import FakeAnthropicAPI, MessagesRequest, Reply, text, tool_calls, tool_use

REDACTED = "**********"
REGISTERED = "registered-by-the-app-4c1d9e"
AGENT_ENV = "agent-env-value-77b1f0a2"
PROCESS_ENV_NAME = "GS_SCRUBBER_TEST_SERVICE_TOKEN"
PROCESS_ENV = "process-env-value-5e8a03c4"
SECRET_STR = "secret-str-value-a9d2e6"
API_SECRET = b"a-test-secret-of-enough-length"

ANTHROPIC = "sk-ant-api03-Q2hlY2tUaGlzSXNOb3RBUmVhbEtleQ-9xZk3"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)

# PEM bodies, one per row, so that a leak names its row.
PEM_AFTER_TEXT = "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB"
PEM_IN_JSON = "MIIEowIBAAKCAQEAs9Yd7Vb1Xc2Pq8Lm4Kt6Jh0Gf3Ds5Ra9Qe1Wz2Xc4Vb6Nm8L"
PEM_CUT_SHORT = "MIIEogIBAAKCAQEAtU6kT5QfU3gzBv0jNRpqJ3kYb9dXTm0wYcH1fPnG4lQ8aZ2x"
PEM_SECOND_HALF = "aVd8ZmNvbnRpbnVlZC1mcm9tLWEtcHJldmlvdXMtdG9vbC1yZXN1bHQtOTk4NzY1"
PUBLIC_KEY_BODY = "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo"
CERT_BODY = "MIIDdzCCAl+gAwIBAgIEAgAAuTANBgkqhkiG9w0BAQUFADBaMQswCQYDVQQGEwJJ"

# (id, text recorded somewhere in a run, the part that must vanish)
SECRET_TEXTS: list[tuple[str, str, str]] = [
    ("anthropic-key", f"calling with {ANTHROPIC} now", ANTHROPIC),
    (
        "openai-project-key",
        "OPENAI key sk-proj-Zx81kQm2Lp0aVb7cDe3FgH9iJk4LmN5oPq6R",
        "Zx81kQm2Lp0aVb7cDe3FgH9iJk4LmN5oPq6R",
    ),
    (
        "openai-legacy-key",
        "use sk-3Fq9LmZp0X8aB7cD2eF6gH1iJ5kL4mN9oP0qR3sT7uV2wX8y",
        "3Fq9LmZp0X8aB7cD2eF6gH1iJ5kL4mN9oP0qR3sT7uV2wX8y",
    ),
    (
        "github-token",
        "token ghp_R4nd0mT0k3nV4lu3F0rT3st1ngP4rp0s3sX9",
        "R4nd0mT0k3nV4lu3F0rT3st1ngP4rp0s3sX9",
    ),
    (
        "github-fine-grained",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
        "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEF",
    ),
    ("gitlab-token", "glpat-x9Yz8Wv7Ut6Sr5Qp4On3", "x9Yz8Wv7Ut6Sr5Qp4On3"),
    ("aws-access-key-id", "aws id AKIAIOSFODNN7EXAMPLE here", "AKIAIOSFODNN7EXAMPLE"),
    (
        "slack-bot-token",
        "slack xoxb-2468013579-1357924680-AbCdEfGhIjKlMnOp",
        "2468013579-1357924680-AbCdEfGhIjKlMnOp",
    ),
    ("stripe-secret-key", "stripe sk_live_51HxAbCdEfGhIjKlMn0pQrSt", "51HxAbCdEfGhIjKlMn0pQrSt"),
    (
        "google-api-key",
        "maps AIzaSyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY ok",
        "SyD-9tSrke72PouQMnMX-a7eZSW0jkFMBWY",
    ),
    ("jwt", f"session jwt {JWT}", "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"),
    (
        "bearer-header",
        "Authorization: Bearer b3ar3r-t0k3n-v4lu3-0192",
        "b3ar3r-t0k3n-v4lu3-0192",
    ),
    (
        "bearer-in-prose",
        "the API said 401: Bearer qwertyuiopasdfghjklz rejected",
        "qwertyuiopasdfghjklz",
    ),
    ("basic-auth", "sent Basic YWxhZGRpbjpvcGVuc2VzYW1l to the proxy", "YWxhZGRpbjpvcGVuc2VzYW1l"),
    ("url-password", "postgresql://admin:S3cretPass99@db.internal/app", "S3cretPass99"),
    ("redis-url-password", "redis://:r3d1sPa55w0rd@cache:6379/0", "r3d1sPa55w0rd"),
    (
        "query-access-token",
        "GET https://api.example.com/v1/items?page=2&access_token=qs-t0ken-8812",
        "qs-t0ken-8812",
    ),
    ("env-token-assignment", "export DEPLOY_TOKEN=dpl-2f7c9a1b3e5d", "dpl-2f7c9a1b3e5d"),
    ("env-secret-assignment", "CLIENT_SECRET=cs-91ab27cd43ef", "cs-91ab27cd43ef"),
    ("env-key-assignment", "STRIPE_KEY=stk-6d5c4b3a2910", "stk-6d5c4b3a2910"),
    ("numeric-token", "MY_SERVICE_TOKEN=82736451", "82736451"),
    ("db-password-assignment", "DB_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ("yaml-password", "password: correcthorse", "correcthorse"),
    ("json-text-secret", '{"api_key": "jt-a1b2c3d4e5", "q": 1}', "jt-a1b2c3d4e5"),
    ("api-key-header", "X-Api-Key: 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
    ("cookie-header", "Cookie: sid=ck-5566778899aa", "ck-5566778899aa"),
    (
        "pem-private-key",
        f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
        PEM_BODY,
    ),
    (
        "history-api-token",
        "gsh.YWxpY2U.Zm9yZ2VkLWJ1dC1zaGFwZWQtbGlrZS1hLXJlYWwtdG9rZW4",
        "Zm9yZ2VkLWJ1dC1zaGFwZWQtbGlrZS1hLXJlYWwtdG9rZW4",
    ),
    (
        "slack-webhook",
        "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
        "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    ),
    # Text before the block: JSON-encoded (a tool's result), its "\n" ends in a letter.
    (
        "pem-after-text",
        f"notes:\n-----BEGIN PRIVATE KEY-----\n{PEM_AFTER_TEXT}\n-----END PRIVATE KEY-----",
        PEM_AFTER_TEXT,
    ),
    (
        "pem-in-json-string",
        json.dumps(
            {
                "notes": "see below\n-----BEGIN RSA PRIVATE KEY-----\n"
                f"{PEM_IN_JSON}\n-----END RSA PRIVATE KEY-----\n"
            }
        ),
        PEM_IN_JSON,
    ),
    # No END line (cut short): its last, partial line goes too.
    (
        "pem-cut-short",
        f"the key: -----BEGIN PRIVATE KEY-----\n{PEM_AFTER_TEXT[::-1]}\n{PEM_CUT_SHORT[:40]}",
        PEM_CUT_SHORT[:40],
    ),
    # The second half of a block split across two tool results: no BEGIN line.
    (
        "pem-second-half",
        f"part 2: {PEM_SECOND_HALF}\n{PEM_CUT_SHORT[::-1]}\n-----END PRIVATE KEY-----",
        PEM_SECOND_HALF,
    ),
    (
        "mongodb-srv-url",
        "mongodb+srv://app:M0ngoPw-77x@cluster0.ab1cd.mongodb.net/db?retryWrites=true",
        "M0ngoPw-77x",
    ),
    (
        "connection-string-password",
        "Server=tcp:db.example.net,1433;User ID=app;Password=Sq1Pw-x9!k;Encrypt=True;",
        "Sq1Pw-x9!k",
    ),
    (
        "azure-account-key",
        "DefaultEndpointsProtocol=https;AccountName=acct;"
        "AccountKey=QWNjb3VudEtleVZhbHVlMTIz+/==;EndpointSuffix=core.windows.net",
        "QWNjb3VudEtleVZhbHVlMTIz",
    ),
    (
        "url-encoded-key",
        "GET /oauth/cb?state=key%3Dsk-ant-api03-VXJsRW5jb2RlZEtleVZhbHVl-x1&x=1",
        "VXJsRW5jb2RlZEtleVZhbHVl",
    ),
    ("url-encoded-assignment", "next=%2Fapi%3Fapi_key%3Dq7Ue9Kx2Lm4Np8", "q7Ue9Kx2Lm4Np8"),
    (
        "curl-user",
        "curl -u deploy:Cu7l-Pa55-w0rd https://artifacts.example.com/x.tgz",
        "Cu7l-Pa55-w0rd",
    ),
    (
        "azure-sas-sig",
        "https://acct.blob.core.windows.net/c/report.csv?sv=2022-11-02&ss=b&sp=r"
        "&se=2030-01-01T00:00:00Z&sig=dGhpc0lzTm90QVJlYWxTaWc%2BX3o%3D",
        "dGhpc0lzTm90QVJlYWxTaWc",
    ),
    (
        "pypi-token",
        "twine upload -p pypi-AgEIcHlwaS5vcmcCJDk5ZTc3YjE0LTU0OWItNGQ0MC1hNWIxLTBmODZkZGE3NzQ0MA",
        "CJDk5ZTc3YjE0LTU0OWItNGQ0MC1h",
    ),
    (
        "huggingface-token",
        "HF token hf_QkVzTmFtZWxlc3NUb2tlbkZvclRlc3Rz",
        "QkVzTmFtZWxlc3NUb2tlbkZvclRlc3Rz",
    ),
    (
        "sendgrid-key",
        "SG.c2VuZGdyaWQtdGVzdC1pZA.c2VuZGdyaWQtdGVzdC1zZWNyZXQtdmFsdWUtZm9yLXRlc3Q",
        "c2VuZGdyaWQtdGVzdC1zZWNyZXQtdmFsdWUtZm9yLXRlc3Q",
    ),
    ("cli-api-key-flag", "mcp-server --api-key Fl4g-Ap1-K3y-0001 --verbose", "Fl4g-Ap1-K3y-0001"),
    ("cli-token-flag", "serve --token=Fl4g-T0k3n-0002", "Fl4g-T0k3n-0002"),
    ("cli-password-flag", "db-tool --password Fl4g-Pa55-0003", "Fl4g-Pa55-0003"),
    ("registered-secret", f"the db says {REGISTERED}", REGISTERED),
    ("agent-env-value", f"deploying with {AGENT_ENV}", AGENT_ENV),
    ("process-env-value", f"service answered {PROCESS_ENV}", PROCESS_ENV),
]

# (key, value under it, the part that must vanish): replaced by the key's name alone.
SECRET_KEYS: list[tuple[str, Any, str]] = [
    ("api_key", "kv-api-key-0001", "kv-api-key-0001"),
    ("apiKey", "kv-camel-api-key-0002", "kv-camel-api-key-0002"),
    ("password", "kv-password-0003", "kv-password-0003"),
    ("secret", "kv-secret-0004", "kv-secret-0004"),
    ("token", "kv-token-0005", "kv-token-0005"),
    ("authorization", "kv-authorization-0006", "kv-authorization-0006"),
    ("cookie", "kv-cookie-0007", "kv-cookie-0007"),
    ("client_secret", "kv-client-secret-0008", "kv-client-secret-0008"),
    ("access_token", "kv-access-token-0009", "kv-access-token-0009"),
    ("refresh_token", "kv-refresh-token-0010", "kv-refresh-token-0010"),
    ("X-Api-Key", "kv-x-api-key-0011", "kv-x-api-key-0011"),
    ("GITHUB_TOKEN", "kv-github-token-0012", "kv-github-token-0012"),
    ("AWS_SECRET_ACCESS_KEY", "kv-aws-secret-0013", "kv-aws-secret-0013"),
    ("private_key", "kv-private-key-0014", "kv-private-key-0014"),
    ("Set-Cookie", "kv-set-cookie-0015", "kv-set-cookie-0015"),
    ("db_passwd", "kv-passwd-0016", "kv-passwd-0016"),
    ("credentials", {"username": "ops", "password": "kv-credentials-0017"}, "kv-credentials-0017"),
    ("session_token", "kv-session-token-0018", "kv-session-token-0018"),
]

# (id, text that must come out of every output unchanged)
LOOKALIKE_TEXTS: list[tuple[str, str]] = [
    ("risk-slug", "risk-assessment-framework-v2"),
    ("tasks-slug", "tasks-2024-q3-quarterly-review-backlog"),
    ("ask-prefix", "ask-anthropic-support-team-about-limits"),
    ("short-sk-slug", "sk-learn-pipeline"),
    ("uuid", "550e8400-e29b-41d4-a716-446655440000"),
    ("git-sha", "9fceb02d0ae598e95dc970b74767f19372d61af8"),
    ("sha256", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    ("url-with-query", "https://example.com/docs?page=2&lang=en"),
    ("url-with-user", "https://deploy@example.com/repo.git"),
    ("url-with-port", "http://localhost:8080/health"),
    ("bearer-prose", "the bearer of good news"),
    ("basic-prose", "a basic understanding of tokenization"),
    ("token-count", "token_count: 1234 tokens"),
    ("author-assignment", "the author=Jane wrote it"),
    ("password-prose", "your password: must be longer"),
    ("password-policy", "password_policy=strict"),
    ("session-id", "session_id=3f2a9c1e7b"),
    ("cookie-count", "cookie_count=12"),
    ("max-token-length", "max_token_length=4096"),
    ("secretary", "the secretary filed it"),
    ("model-name", "claude-sonnet-4-5"),
    ("version", "v1.2.3-rc.1"),
    ("timestamp", "2024-05-01T12:00:00Z"),
    ("email", "ops@example.com"),
    ("keyboard", "keyboard=ctrl+k"),
    ("monkey", "monkey=banana"),
    ("ghost", "ghost_protocol_v2"),
    ("akia-word", "AKIAshort"),
    (
        "pem-public-key",
        f"-----BEGIN PUBLIC KEY-----\n{PUBLIC_KEY_BODY}\n-----END PUBLIC KEY-----",
    ),
    ("pem-certificate-tail", f"{CERT_BODY}\n-----END CERTIFICATE-----"),
    ("url-encoded-query", "https://example.com/?next=%2Fhome%3Fpage%3D2"),
    ("curl-user-no-password", "curl -u deploy https://example.com/file"),
    ("docker-uid-gid", "docker run -u 1000:1000 image"),
    ("signature-call", "sig=inspect.signature(fn)"),
    ("signal-query", "https://example.com/?signal=term&q=sig"),
    ("pypi-server", "pypi-server-config"),
    ("hf-identifiers", "self_hf_x = hf_hub_download(repo)"),
    ("sendgrid-domain", "visit SG.com today"),
    ("token-type-flag", "--token-type bearer"),
    ("password-file-flag", "--password-file /run/secrets/db"),
    ("flag-prose", "the --token flag sets it"),
    ("mkdir-p", "mkdir -p /tmp/work"),
]

# (key, value): names about a secret, not secrets; the value must survive.
LOOKALIKE_KEYS: list[tuple[str, Any]] = [
    ("token_usage", "kept-token-usage-a1"),
    ("secretary", "kept-secretary-b2"),
    ("session_id", "kept-session-id-c3"),
    ("password_policy", "kept-password-policy-d4"),
    ("cache_key", "kept-cache-key-e5"),
    ("token_type", "kept-token-type-f6"),
    ("api_key_id", "kept-api-key-id-g7"),
    ("public_key", "kept-public-key-h8"),
    ("author", "kept-author-i9"),
    ("keyboard", "kept-keyboard-j10"),
    ("auth_method", "kept-auth-method-k11"),
    ("token_budget", "kept-token-budget-l12"),
    ("max_token_length", 40961),
    ("cookie_count", 12345),
    ("input_tokens", 777001),
]


# A stdio MCP server started with secrets in its args; it echoes its command line
# to its stderr (logged and recorded) and in a tool's result (recorded, sent to
# the model, stored in history), and writes it to a file (what it really got).
MCP_API_KEY = "mcp-arg-api-key-3e7a91"
MCP_TOKEN = "mcp-arg-token-5b2c84"
MCP_PASSWORD = "mcp-arg-password-9d1f07"
MCP_SHORT_PASSWORD = "MyKey_7x2q9z"  # "key" inside: still a -p password, not a flag
MCP_KEPT = "--token-type bearer --port=8931 -p 8080"
MCP_ARGS = [
    "--api-key",
    MCP_API_KEY,
    f"--token={MCP_TOKEN}",
    "--password",
    MCP_PASSWORD,
    f"-p{MCP_SHORT_PASSWORD}",
    *MCP_KEPT.split(),
]
MCP_SERVER = """
import os, sys
from mcp.server.mcpserver import MCPServer

with open(os.environ["ARGV_FILE"], "w") as out:
    out.write("\\n".join(sys.argv[1:]))
print("argv server started with " + " ".join(sys.argv[1:]), file=sys.stderr, flush=True)
server = MCPServer("argv")


@server.tool()
def command_line() -> str:
    \"\"\"How this server was started.\"\"\"
    return "argv server started with " + " ".join(sys.argv[1:])


server.run()
"""
#: The server's config, filled in by the fixture (its script and argv file are in tmp).
MCP_CONFIG: dict[str, Any] = {}
#: The outputs that record the MCP server's start or its tool's result (the others see neither).
MCP_OUTPUTS = ["tree.to_json", "tree.save", "jsonl sink", "otel sink", "history store", "logs"]


@dataclass(frozen=True)
class Case:
    """One prompt of the run: the tool input the model sends, and its final reply."""

    user: str
    payload: dict[str, Any]
    reply: str


def _cases() -> list[Case]:
    texts = [t for _, t, _ in SECRET_TEXTS] + [t for _, t in LOOKALIKE_TEXTS]
    cases = [Case(t, {"text": t}, t) for t in texts]
    for key, value, *_ in [*SECRET_KEYS, *LOOKALIKE_KEYS]:
        shown = json.dumps(value) if isinstance(value, dict) else value
        cases.append(Case(f"about {key}", {key: value}, f"{key}={shown}"))
    return cases


CASES = _cases()


class Creds(BaseModel):
    user: str
    password: SecretStr


def echo(payload: dict[str, Any]) -> Any:
    """Return the payload."""
    if payload.get("text") == "secret-str":
        return Creds(user="ops", password=SecretStr(SECRET_STR))
    return payload


def explode(payload: dict[str, Any]) -> str:
    """Fail, naming the payload."""
    raise RuntimeError(f"explode failed on {payload.get('text', payload)}")


def answer(request: MessagesRequest) -> Any:
    """The fake model: call both tools with the case, then reply with its text."""
    number = int(request.last_user_text().split(":", 1)[0].removeprefix("case "))
    case = CASES[number] if number < len(CASES) else Case("", {"text": "secret-str"}, "done")
    if not request.tools_called():
        return tool_calls(
            ("echo", {"payload": case.payload}), ("explode", {"payload": case.payload})
        )
    return text(case.reply, usage={"input_tokens": 21, "output_tokens": 9})


@workflow(name="scrubbed")
async def scrubbed(ctx: WorkflowContext, given: dict[str, Any]) -> str:
    # ``given`` is only recorded (the workflow node's input), SecretStr and all.
    ctx.state["db"] = SecretStr(SECRET_STR)
    ctx.snapshot_state()
    agent = Agent(
        name="scrubbee",
        tools=[echo, explode],
        env={"DEPLOY_TOKEN": AGENT_ENV},
        client=FakeAnthropicAPI(answer).client(),
    )

    async def one(number: int, user: str) -> str:
        set_task(f"case {number}", metadata={"dsn": SecretStr(SECRET_STR), "note": user})
        reply: str = await agent.prompt(f"case {number}: {user}")
        return reply

    steps = [ctx.step(f"case-{n}", one(n, case.user)) for n, case in enumerate(CASES)]
    steps.append(ctx.step("secret-str", one(len(CASES), "secret-str")))
    steps.append(ctx.step("mcp", _mcp_prompt()))
    await asyncio.gather(*steps)
    return "finished"


def _mcp_model(request: MessagesRequest) -> Reply:
    if request.tool_results():
        return text(str(request.tool_results()[0]["content"]))
    return tool_use("mcp__argv__command_line", {})


async def _mcp_prompt() -> str:
    agent = Agent(name="mcp-user", mcps=[MCP_CONFIG], client=FakeAnthropicAPI(_mcp_model).client())
    reply: str = await agent.prompt("how was the server started?")
    return reply


# -- the outputs ------------------------------------------------------------------------


def _span_text(found: list[ReadableSpan]) -> str:
    parts: list[str] = []
    for span in found:
        parts.append(span.name)
        parts += [k + "=" + str(v) for k, v in (span.attributes or {}).items()]
        for event in span.events:
            parts.append(event.name)
            parts += [k + "=" + str(v) for k, v in (event.attributes or {}).items()]
        parts.append(span.status.description or "")
    return "\n".join(parts)


def _database_text(path: Path) -> str:
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = [repr(row) for t in tables for row in db.execute(f'SELECT * FROM "{t}"')]
    return "\n".join(rows)


def _foreign_spans() -> str:
    """Spans of some other instrumentation, through `RedactingSpanExporter`."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(RedactingSpanExporter(memory)))
    tracer = provider.get_tracer("elsewhere")
    for number, case in enumerate(CASES):
        with tracer.start_as_current_span(f"call {number}") as span:
            for key, value in case.payload.items():
                shown = json.dumps(value) if isinstance(value, dict) else value
                span.set_attribute(f"case.{number}.{key}" if key == "text" else key, shown)
            span.add_event("note", {"detail": case.reply})
            span.record_exception(RuntimeError(case.reply))
    return _span_text(list(memory.get_finished_spans()))


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)  # MCP servers' stderr lines are DEBUG
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def _api_outputs(store: HistoryStore) -> tuple[str, str, dict[str, Any]]:
    """The 422 body and the log lines of one request carrying every case as a parameter."""
    params: dict[str, str] = {}
    for number, (_, value, *_) in enumerate([*SECRET_TEXTS, *LOOKALIKE_TEXTS]):
        params[f"note{number}"] = value
    for key, value, *_ in [*SECRET_KEYS, *LOOKALIKE_KEYS]:
        params[key] = json.dumps(value) if isinstance(value, dict) else str(value)
    lines = _Lines()
    loggers = [logging.getLogger(n) for n in ("groundswell.history.api", "uvicorn.access")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(lines)
        logger.setLevel(logging.INFO)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # log_config=None: uvicorn's request log goes through the loggers as configured here.
    server = uvicorn.Server(
        uvicorn.Config(create_app(store, secret=API_SECRET), log_config=None, lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started:
            assert time.monotonic() < deadline, "the API server did not start"
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        token = issue_token("alice", API_SECRET)
        with httpx2.Client(base_url=url, timeout=10) as client:
            answer = client.get(
                "/api/introspection/alice",
                params=params,
                headers={"Authorization": f"Bearer {token}"},
            )
            leak = client.get(f"/api/introspection/alice?access_token={token}")
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
        for logger, level in zip(loggers, levels, strict=True):
            logger.removeHandler(lines)
            logger.setLevel(level)
    assert answer.status_code == 422, answer.text
    issue = {"token": token, "status": leak.status_code, "body": leak.text, "log": lines.lines[2:]}
    return answer.text, "\n".join(lines.lines[:2]), issue


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Every output of one run holding every case (and of one API request holding them)."""
    tmp = tmp_path_factory.mktemp("scrubber")
    groundswell.register_secret(REGISTERED)
    (tmp / "argv_server.py").write_text(MCP_SERVER)
    MCP_CONFIG.update(
        type="stdio",
        name="argv",
        command=sys.executable,
        args=[str(tmp / "argv_server.py"), *MCP_ARGS],
        env={"ARGV_FILE": str(tmp / "argv.txt")},
    )
    logged = _Lines()
    root = logging.getLogger("groundswell")
    root.addHandler(logged)
    level = root.level
    root.setLevel(logging.DEBUG)
    database = tmp / "history.db"
    manager = groundswell.get_plugin_manager()
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(PROCESS_ENV_NAME, PROCESS_ENV)
        patch.setenv(TRACE_DIR_ENV, str(tmp / "traces"))
        patch.setenv("GROUNDSWELL_HISTORY_URL", f"sqlite:///{database}")
        patch.setenv(groundswell_otel.CONTENT_ENV, "SPAN_AND_EVENT")
        manager.refresh_sinks("jsonl")
        manager.refresh_sinks("history")
        groundswell_otel.instrument(provider)
        try:
            # The run's input holds every case, the agent's env value among them, and is
            # recorded (and may be written by a sink) before the workflow builds its
            # agent: an agent with that env is built first, as an app would at import.
            Agent(name="env-holder", env={"DEPLOY_TOKEN": AGENT_ENV})
            given = {"cases": [c.payload for c in CASES], "dsn": SecretStr(SECRET_STR)}
            result = asyncio.run(scrubbed.run(given))
            assert groundswell.flush_sinks()
            deadline = time.monotonic() + 5  # the stderr reader thread logs the server's line
            while not any("argv server started" in line for line in logged.lines):
                assert time.monotonic() < deadline, "the MCP server's stderr was not logged"
                time.sleep(0.01)
            store = HistoryStore(f"sqlite:///{database}")
            for number, case in enumerate(CASES):  # memories are stored too
                store.remember("scrubbee", f"case-{number}", case.reply, metadata=case.payload)
            tree_file = result.tree.save(tmp / "saved.jsonl")
            (trace,) = (tmp / "traces").glob("*-scrubbed-*.jsonl")
            body, api_logged, issue = _api_outputs(store)
            yield {
                "tree.to_json": json.dumps(result.tree.to_json()),
                "tree.save": tree_file.read_text(),
                "jsonl sink": trace.read_text(),
                "otel sink": _span_text(list(memory.get_finished_spans())),
                "otel exporter": _foreign_spans(),
                "history store": _database_text(database),
                "history api 422": body,
                "history api logs": api_logged,
                "logs": "\n".join(logged.lines),
                "tree.render": result.tree.render(),
                "_argv": (tmp / "argv.txt").read_text().split("\n"),
                "_result": result,
                "_spans": list(memory.get_finished_spans()),
                "_store": store,
                "_issue": issue,
            }
            store.close()
        finally:
            root.removeHandler(logged)
            root.setLevel(level)
            groundswell_otel.uninstrument()
            patch.undo()
            manager.refresh_sinks("jsonl")
            manager.refresh_sinks("history")


CLI_FLOWS = """
import groundswell
from pydantic import SecretStr

from groundswell import Agent
from groundswell.testing import FakeAnthropicAPI, text

groundswell.register_secret({registered!r})
# Building an agent registers its env values as secrets, as in the main run.
AGENT = Agent(name="cli", env={{"DEPLOY_TOKEN": {agent_env!r}}}, client=FakeAnthropicAPI([text("x")]).client())


@groundswell.workflow(name="cli-scrubbed")
async def cli_scrubbed(ctx, cases):
    ctx.state["cases"] = cases
    ctx.state["db"] = SecretStr({secret_str!r})
    ctx.snapshot_state()
    for number, case in enumerate(cases):
        await ctx.step(f"case-{{number}}", lambda case=case: case)
    return {{"cases": cases, "replies": [c["reply"] for c in cases]}}
"""


@pytest.fixture(scope="module")
def cli_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``groundswell run``'s outputs for a workflow with every case in its input and state."""
    tmp = tmp_path_factory.mktemp("scrubber-cli")
    flows = CLI_FLOWS.format(registered=REGISTERED, agent_env=AGENT_ENV, secret_str=SECRET_STR)
    (tmp / "cli_flows.py").write_text(flows)
    cases = [{**c.payload, "reply": c.reply} for c in CASES]
    (tmp / "input.json").write_text(json.dumps({"cases": cases}))
    env = {**os.environ, PROCESS_ENV_NAME: PROCESS_ENV, "PYTHONPATH": str(tmp)}

    def run(*flags: str) -> str:
        command = [sys.executable, "-m", "groundswell.cli", "run", "cli_flows:cli_scrubbed"]
        done = subprocess.run(
            [*command, "--input", "@input.json", *flags],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    return {
        "cli run --jsonl": run("--jsonl", "--save", "saved.jsonl"),
        "cli run --save": (tmp / "saved.jsonl").read_text(),
        "cli run --json": run("--json"),
    }


OUTPUTS = [
    "tree.to_json",
    "tree.save",
    "jsonl sink",
    "otel sink",
    "otel exporter",
    "history store",
    "history api 422",
    "history api logs",
    "logs",
]
CLI_OUTPUTS = ["cli run --jsonl", "cli run --json", "cli run --save"]
GONE = [(i, gone) for i, _, gone in SECRET_TEXTS]
GONE += [(f"key-{key}", gone) for key, _, gone in SECRET_KEYS]
GONE += [("secret-str", SECRET_STR)]
MCP_GONE = [
    ("mcp-args-api-key", MCP_API_KEY),
    ("mcp-args-token", MCP_TOKEN),
    ("mcp-args-password", MCP_PASSWORD),
    ("mcp-args-short-password", MCP_SHORT_PASSWORD),
]
# A multi-line text is checked by its longest line: JSON outputs escape the line breaks.
KEPT = [(i, max(t.splitlines(), key=len)) for i, t in LOOKALIKE_TEXTS]
KEPT += [(f"key-{k}", str(v)) for k, v in LOOKALIKE_KEYS]


# The rendered tree shows names and the first 80 characters of errors: secrets only.
@pytest.mark.parametrize("output", [*OUTPUTS, "tree.render"])
@pytest.mark.parametrize(("shape", "gone"), GONE + MCP_GONE, ids=[i for i, _ in GONE + MCP_GONE])
def test_secret_shapes_vanish_from_every_output(
    outputs: dict[str, Any], output: str, shape: str, gone: str
) -> None:
    assert gone not in outputs[output], f"{shape} leaks through {output}"
    assert REDACTED in outputs[output]


@pytest.mark.parametrize("output", OUTPUTS)
@pytest.mark.parametrize(("lookalike", "kept"), KEPT, ids=[i for i, _ in KEPT])
def test_lookalikes_survive_every_output(
    outputs: dict[str, Any], output: str, lookalike: str, kept: str
) -> None:
    assert kept in outputs[output], f"{lookalike} was destroyed by {output}"


@pytest.mark.parametrize("output", MCP_OUTPUTS)
def test_an_mcp_servers_args_are_scrubbed_where_recorded_and_it_runs_with_the_real_ones(
    outputs: dict[str, Any], output: str
) -> None:
    # The server got its arguments as given...
    assert outputs["_argv"] == MCP_CONFIG["args"][1:]
    # ...and every output that records them (the command line on its mcp_connect
    # node, the line it printed to its stderr, its tool's result) keeps all but the secrets.
    shown = f"--api-key {REDACTED} --token={REDACTED} --password {REDACTED} -p{REDACTED}"
    assert f"argv server started with {shown} {MCP_KEPT}" in outputs[output]
    (connect,) = outputs["_result"].tree.find(type="mcp_connect")
    assert connect.payload["command"][2:] == [
        "--api-key",
        REDACTED,
        f"--token={REDACTED}",
        "--password",
        REDACTED,
        f"-p{REDACTED}",
        *MCP_KEPT.split(),
    ]


@pytest.mark.parametrize("output", CLI_OUTPUTS)
@pytest.mark.parametrize(("shape", "gone"), GONE, ids=[i for i, _ in GONE])
def test_secret_shapes_vanish_from_every_cli_output(
    cli_outputs: dict[str, str], output: str, shape: str, gone: str
) -> None:
    assert gone not in cli_outputs[output], f"{shape} leaks through {output}"
    assert REDACTED in cli_outputs[output]


@pytest.mark.parametrize("output", CLI_OUTPUTS)
@pytest.mark.parametrize(("lookalike", "kept"), KEPT, ids=[i for i, _ in KEPT])
def test_lookalikes_survive_every_cli_output(
    cli_outputs: dict[str, str], output: str, lookalike: str, kept: str
) -> None:
    assert kept in cli_outputs[output], f"{lookalike} was destroyed by {output}"


def _json(value: Any) -> Any:
    while isinstance(value, str) and value[:1] in ('"', "{"):
        value = json.loads(value)
    return value


def test_counts_stay_numbers_in_every_output(outputs: dict[str, Any]) -> None:
    tree = json.loads(outputs["tree.to_json"])
    calls = [n for n in tree["nodes"] if n["type"] == "model_call"]
    assert calls and all(isinstance(n["metrics"]["usage"]["input_tokens"], int) for n in calls)
    # Tool results reach the model (and the tree) as JSON text: the numbers in it stay numbers.
    echoed = [_json(n["payload"]["output"]) for n in tree["nodes"] if n["name"] == "echo"]
    assert {"max_token_length": 40961} in echoed and {"input_tokens": 777001} in echoed
    assert {"cookie_count": 12345} in echoed
    chats = [s for s in outputs["_spans"] if s.name.startswith("chat ")]
    counts = [s.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] for s in chats]
    assert counts and all(isinstance(c, int) and c > 0 for c in counts) and 21 in counts
    results = [
        _json(s.attributes[A.GEN_AI_TOOL_CALL_RESULT])
        for s in outputs["_spans"]
        if s.name == "execute_tool echo"
    ]
    assert {"max_token_length": 40961} in results
    store: HistoryStore = outputs["_store"]
    (session, *_) = store.sessions("scrubbee", limit=1)
    loaded = store.session(session.id)
    assert loaded is not None and loaded.iterations is not None
    usages = [i["usage"] for i in loaded.iterations if i["kind"] == "model_turn"]
    assert usages and all(isinstance(u.get("input_tokens"), int) for u in usages)


def test_the_saved_log_and_the_trace_still_replay_to_the_scrubbed_tree(
    outputs: dict[str, Any],
) -> None:
    tree = outputs["_result"].tree
    assert EventTree.from_json(tree.to_json()) == tree
    assert (
        EventTree.replay(json.loads(line) for line in outputs["tree.save"].splitlines()).to_json()
        == EventTree.replay(
            json.loads(line) for line in outputs["jsonl sink"].splitlines()
        ).to_json()
    )


def test_a_token_sent_as_a_query_parameter_is_never_echoed(outputs: dict[str, Any]) -> None:
    issue = outputs["_issue"]
    assert issue["status"] == 422
    body = json.loads(issue["body"])
    assert "access_token: unknown parameter" in body["message"]
    assert issue["token"] not in issue["body"] and REDACTED in issue["body"]
    assert len(issue["log"]) == 2  # the query log and uvicorn's request line
    assert all(issue["token"] not in line for line in issue["log"])
    assert "access_token=**********" in issue["log"][-1]


# -- the scrubber itself ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("DB_PASSWORD=hunter2hunter2", "DB_PASSWORD=**********"),
        ('{"client_secret": "abcd1234"}', '{"client_secret": "**********"}'),
        ('{\\"password\\": \\"two words\\"}', '{\\"password\\": \\"**********\\"}'),
        ("postgresql://admin:S3cretPass@db/app", "postgresql://admin:**********@db/app"),
        ("Authorization: Bearer abcdefghijklmnop1", "Authorization: **********"),
        ("401: Bearer abcdefghijklmnopqrstu", "401: Bearer **********"),
        ("?limit=3&access_token=abc123", "?limit=3&access_token=**********"),
        ("password: correcthorse", "password: **********"),
        ("password: must be longer", "password: must be longer"),
        ("access_token: unknown parameter", "access_token: unknown parameter"),
        ("token_count: 1234 tokens", "token_count: 1234 tokens"),
        ("risk-assessment-framework-v2", "risk-assessment-framework-v2"),
        ("api_key: null", "api_key: null"),
        # JSON-encoded text: a "\n" escape ends in a letter, yet starts a word.
        (
            '{"v": "notes:\\n-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADAN\\n-----END PRIVATE KEY-----"}',
            '{"v": "notes:\\n**********"}',
        ),
        ('{"v": "x\\ntoken=abc123456"}', '{"v": "x\\ntoken=**********"}'),
        ('{"v": "x\\nBearer abcdefghijklmnop1"}', '{"v": "x\\nBearer **********"}'),
        ("key: -----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nQyMjAx", "key: **********"),
        ("Zm9yZ2VkLWJ1\nYWJjZGVm\n-----END PRIVATE KEY-----\nbye", "**********\nbye"),
        (
            "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADAN\nThanks for reading",
            "**********\nThanks for reading",
        ),
        ("state=key%3Dsk-ant-api03-abcdefgh12345678&x=1", "state=key%3D**********&x=1"),
        ("curl -u me:Pw-123x https://x", "curl -u me:********** https://x"),
        ('["curl", "-u", "me:Pw-123x"]', '["curl", "-u", "me:**********"]'),
        (
            "curl -u me https://x; docker run -u 1000:1000 img",
            "curl -u me https://x; docker run -u 1000:1000 img",
        ),
        ("?sv=2022-11-02&sig=AbCd%2Fef%3D&se=2030", "?sv=2022-11-02&sig=**********&se=2030"),
        ("--api-key abc123xyz --verbose", "--api-key ********** --verbose"),
        ("--token=abc123xyz", "--token=**********"),
        ('--password "two words" -v', '--password "**********" -v'),
        ("the --token flag sets it", "the --token flag sets it"),
        ("--token-type bearer", "--token-type bearer"),
    ],
)
def test_scrub_replaces_only_the_secret(given: str, expected: str) -> None:
    assert scrub(given) == expected
    assert scrub(expected) == expected  # idempotent


def test_a_pem_key_split_across_two_tool_results_is_scrubbed_in_both() -> None:
    first, second = PEM_BODY[:32], PEM_BODY[32:]
    halves = [
        f"-----BEGIN PRIVATE KEY-----\n{PEM_AFTER_TEXT}\n{first}",
        f"{second}\n{PEM_CUT_SHORT}\n-----END PRIVATE KEY-----\n",
    ]

    def read_part(number: int) -> dict[str, str]:
        """Read one part of the key file."""
        return {"part": str(number), "content": halves[number]}

    def model(request: MessagesRequest) -> Reply:
        done = len(request.tool_results())
        return tool_use("read_part", {"number": done}) if done < 2 else text("read")

    agent = Agent(name="reader", tools=[read_part], client=FakeAnthropicAPI(model).client())
    result = asyncio.run(agent.run("read the key"))
    recorded = json.dumps(result.tree.to_json())
    assert len(result.tree.find(type="tool_call")) == 2
    for line in (PEM_AFTER_TEXT, first, second, PEM_CUT_SHORT):
        assert line not in recorded
    assert recorded.count(REDACTED) >= 2  # each half, on its tool_call node


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("api_key", True),
        ("x-api-key", True),
        ("apiKey", True),
        ("OPENAI_API_KEY", True),
        ("GITHUB_TOKEN", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("password", True),
        ("PASSWORD_B64", True),
        ("http.request.header.authorization", True),
        ("Set-Cookie", True),
        ("credentials", True),
        ("token2", True),
        ("token_usage", False),
        ("max_token_length", False),
        ("input_tokens", False),
        ("gen_ai.usage.input_tokens", False),
        ("secretary", False),
        ("session_id", False),
        ("cookie_count", False),
        ("password_policy", False),
        ("cache_key", False),
        ("key", False),
        ("SSH_AUTH_SOCK", False),
        ("PWD", False),
    ],
)
def test_secret_names_are_whole_words(name: str, secret: bool) -> None:
    assert is_secret_key(name) is secret


def test_redact_keeps_numbers_flags_and_structure() -> None:
    value = {
        "usage": {"input_tokens": 12, "output_tokens": 3},
        "api_key": "x" * 12,
        "auth_enabled": True,
        "password": None,
        "nested": [("a", {"secret": 1})],
        "ratio": float("nan"),
        "db": SecretStr("y" * 12),
    }
    assert redact(value) == {
        "usage": {"input_tokens": 12, "output_tokens": 3},
        "api_key": REDACTED,
        "auth_enabled": True,
        "password": None,
        "nested": [["a", {"secret": REDACTED}]],
        "ratio": "nan",
        "db": REDACTED,
    }


def test_scrubbing_any_depth_never_hits_the_recursion_limit() -> None:
    deep: Any = {"password": "p4ssw0rd!"}
    for _ in range(sys.getrecursionlimit() * 2):
        deep = {"next": deep}
    cleaned = redact(deep)
    while isinstance(cleaned, dict) and "next" in cleaned:
        cleaned = cleaned["next"]
    assert cleaned in ({"password": REDACTED}, "…[too deep]")


def test_a_secret_set_in_the_environment_is_scrubbed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert scrub("value env-secret-value-0f0f0f") == "value env-secret-value-0f0f0f"
    monkeypatch.setenv("SOME_VENDOR_API_KEY", "env-secret-value-0f0f0f")
    assert scrub("value env-secret-value-0f0f0f") == f"value {REDACTED}"


def test_a_command_line_keeps_its_options_and_registers_only_credentials() -> None:
    from groundswell.scrubbing.scrubber import argv_secrets, scrub_argv

    mysql = ["mysql", "-uroot", "-pMyKey_2024", "warehouse_prod"]
    assert scrub_argv(mysql) == ["mysql", "-uroot", f"-p{REDACTED}", "warehouse_prod"]
    assert argv_secrets(mysql) == ["MyKey_2024"]  # never the database's name
    flags = ["--auth", "OAuth2", "--ssh-key", "/home/u/.ssh/id_ed25519", "--token", "t0k-9f3a1c2e"]
    assert scrub_argv(flags) == ["--auth", REDACTED, "--ssh-key", REDACTED, "--token", REDACTED]
    # A mode and a path are hidden where recorded, but not replaced everywhere else.
    assert argv_secrets(flags) == ["t0k-9f3a1c2e"]
