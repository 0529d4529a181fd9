"""The history API's bearer tokens: one per agent, and operator tokens.

A token is an HMAC under the server's secret, so tokens need no table. An
agent token (``gsh.<agent>.<mac>``, `issue_token`) opens only its own
agent's sessions; an operator token (``gsho.<name>.<mac>``,
`issue_operator_token`) opens every agent's. The secret is
``GROUNDSWELL_HISTORY_SECRET``, else a random one kept in
``$GROUNDSWELL_HOME/history-api.secret`` (created on first use, mode 0600);
replacing it revokes every token.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import hmac
import os
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from groundswell import ConfigurationError

from .store import groundswell_home

__all__ = [
    "SECRET_ENV",
    "Caller",
    "agent_for_token",
    "caller_for_token",
    "issue_operator_token",
    "issue_token",
    "load_secret",
]

SECRET_ENV = "GROUNDSWELL_HISTORY_SECRET"
SECRET_FILE = "history-api.secret"
TOKEN_PREFIX = "gsh"
OPERATOR_PREFIX = "gsho"
# Each kind of token signs its own text, so an agent named like an operator
# gets no operator rights, and the reverse.
_DOMAINS = {TOKEN_PREFIX: "groundswell-history", OPERATOR_PREFIX: "groundswell-history-operator"}


@dataclass(frozen=True)
class Caller:
    """Who a valid token belongs to: an agent, or an operator (who may see every agent)."""

    name: str
    operator: bool = False

    def may_see(self, agent_id: str) -> bool:
        """Whether this caller may read and change ``agent_id``'s sessions."""
        return self.operator or self.name == agent_id

    @property
    def label(self) -> str:
        """How logs and decisions name the caller: ``agent:NAME`` or ``operator:NAME``.

        The kind comes from the token's signed prefix, never from the name, so an
        agent named ``operator:root`` is ``agent:operator:root``.
        """
        return f"{'operator' if self.operator else 'agent'}:{self.name}"


def load_secret(*, create: bool = True) -> bytes:
    """The key tokens are signed with: ``GROUNDSWELL_HISTORY_SECRET``, else the secret file."""
    from_env = os.environ.get(SECRET_ENV)
    if from_env:
        if len(from_env) < 16:
            raise ConfigurationError(
                f"{SECRET_ENV} is too short ({len(from_env)} characters); use at least 16, "
                'e.g. python -c "import secrets; print(secrets.token_hex(32))"'
            )
        return from_env.encode()
    path = groundswell_home() / SECRET_FILE
    try:
        if not path.exists():
            if not create:
                raise ConfigurationError(
                    f"no history API secret: set {SECRET_ENV} or create {path} "
                    "(groundswell history token AGENT_ID creates it)"
                )
            _create_secret(path)
        text = path.read_text().strip()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read the history API secret {str(path)!r}: {exc.strerror or exc}; "
            f"fix the file or set {SECRET_ENV}"
        ) from exc
    if len(text) < 16:
        raise ConfigurationError(
            f"the history API secret in {path} holds {len(text)} characters, fewer than 16; "
            "write a longer one there (tokens issued with the old one stop working)"
        )
    return text.encode()


def _create_secret(path: Path) -> None:
    """Write a new random secret to ``path`` unless one is there, atomically.

    The secret is written to a private temporary file and then linked into
    place, so a process racing this one finds either no file or a whole one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".secret-")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(32))
        with contextlib.suppress(FileExistsError):  # another process won: keep theirs
            os.link(temporary, path)
    finally:
        os.unlink(temporary)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _mac(secret: bytes, prefix: str, name: str) -> bytes:
    return hmac.new(secret, f"{_DOMAINS[prefix]}:{name}".encode(), hashlib.sha256).digest()


def _issue(prefix: str, name: str, secret: bytes | None) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"the name must be a non-empty string, got {name!r}")
    key = load_secret() if secret is None else secret
    return f"{prefix}.{_b64(name.encode())}.{_b64(_mac(key, prefix, name))}"


def issue_token(agent_id: str, secret: bytes | None = None) -> str:
    """The bearer token that lets ``agent_id`` (and only it) read and change its sessions."""
    return _issue(TOKEN_PREFIX, agent_id, secret)


def issue_operator_token(name: str = "operator", secret: bytes | None = None) -> str:
    """A bearer token that opens every agent's sessions; ``name`` shows in the query log."""
    return _issue(OPERATOR_PREFIX, name, secret)


def caller_for_token(token: str, secret: bytes) -> Caller | None:
    """Who a token was issued for, or ``None`` when it is not a valid token."""
    parts = token.split(".")
    if len(parts) != 3 or parts[0] not in _DOMAINS:
        return None
    try:
        name = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)).decode()
        mac = base64.urlsafe_b64decode(parts[2] + "=" * (-len(parts[2]) % 4))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    if not hmac.compare_digest(mac, _mac(secret, parts[0], name)):
        return None
    return Caller(name, operator=parts[0] == OPERATOR_PREFIX)


def agent_for_token(token: str, secret: bytes) -> str | None:
    """The agent an agent token was issued for, or ``None`` (not valid, or an operator's)."""
    caller = caller_for_token(token, secret)
    return caller.name if caller is not None and not caller.operator else None
