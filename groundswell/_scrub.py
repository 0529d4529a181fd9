"""The secret scrubber: the one filter every output of a run passes through.

The tree's JSON and saved logs, the JSONL sink, OpenTelemetry spans, the
history store and its HTTP API all clean what they write with `scrub` (text)
or `scrub_json` / `groundswell.redact` (structures). What it removes, each
replaced by ``**********`` (docs/observability.md, "Secrets", has the table):

1. Known values, anywhere in a string: values given to `register_secret`
   (agents' API keys and ``env`` values, MCP tokens) and the values of this
   process's secret-named environment variables (`is_secret_key`, 8
   characters or more).
2. Credentials by their shape, as whole words only (``risk-assessment`` is
   not an ``sk-`` key): Anthropic, OpenAI, Stripe, GitHub, GitLab, Slack and
   Google keys, AWS access key ids, JWTs, Groundswell history API tokens, PEM
   private keys, Slack webhook URLs.
3. Credentials by their context: the token after ``Bearer`` / ``Basic``, the
   password in ``scheme://user:password@host``, and the value of
   ``name=value``, ``name: value`` or ``"name": "value"`` when ``name`` is a
   secret name (``DB_PASSWORD=``, ``?access_token=``, ``"api_key":``).
4. In structures, the whole value under a secret-named key (`is_secret_key`).

Look-alikes survive: ``token_usage``, ``max_token_length``, ``session_id``,
``cookie_count`` or ``password_policy`` are names *about* a secret, not
secrets; UUIDs, git SHAs and cache keys match no shape.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable
from typing import Any

__all__ = [
    "REDACTED",
    "is_secret_key",
    "register_secret",
    "replace_registered",
    "scrub",
    "scrub_fields",
    "scrub_json",
]

REDACTED = "**********"
TOO_DEEP = "…[too deep]"
#: How deep `scrub_json` follows containers; a tree's JSON is far shallower.
MAX_NESTING = 1_000
_INF = float("inf")
# Shorter text holds no secret worth the name: registered secrets have 6
# characters or more, and "token=x" is not worth mangling short words for.
_SHORTEST = 6

# -- secret names -------------------------------------------------------------------

# The last word of a name that holds a credential (``GITHUB_TOKEN``, ``x-api-key``...).
_SECRET_WORDS = frozenset(
    {
        "apikey",
        "accesskey",
        "secretkey",
        "privatekey",
        "auth",
        "authorization",
        "cookie",
        "cookies",
        "credential",
        "credentials",
        "jwt",
        "passphrase",
        "passwd",
        "password",
        "secret",
        "secrets",
        "token",
    }
)
# ``<word>_key`` is a credential (STRIPE_KEY, private_key, x-api-key) unless the
# word says it is a lookup key.
_PLAIN_KEYS = frozenset(
    {
        "cache",
        "composite",
        "dedupe",
        "foreign",
        "group",
        "hash",
        "idempotency",
        "index",
        "join",
        "lookup",
        "map",
        "natural",
        "node",
        "op",
        "partition",
        "primary",
        "public",
        "request",
        "routing",
        "row",
        "shard",
        "sort",
        "surrogate",
        "unique",
    }
)
# Words after the secret word that still name the secret itself (``PASSWORD_B64``);
# any other word makes the name about the secret (``token_usage``, ``password_policy``).
_VALUE_SUFFIXES = frozenset(
    {"b64", "base64", "bytes", "data", "hex", "pem", "plain", "plaintext", "raw", "str", "value"}
)
# Words of a name, digits kept on the word before them ("B64", "token2").
_WORDS = re.compile(r"[A-Z]?[a-z]+[0-9]*|[A-Z]+[0-9]*(?![a-z])|[0-9]+")


@functools.lru_cache(maxsize=4096)
def is_secret_key(name: str) -> bool:
    """Whether a key, attribute or variable name holds a credential.

    The name is split into words (``snake_case``, ``kebab-case``, dots,
    ``camelCase``): it is secret when it ends in ``password``, ``passwd``,
    ``passphrase``, ``secret(s)``, ``token``, ``auth``, ``authorization``,
    ``cookie(s)``, ``credential(s)`` or ``jwt``, or in ``<word>_key`` (``api_key``,
    ``STRIPE_KEY``; not ``cache_key``, ``primary_key`` or ``public_key``).
    Trailing digits and value words (``_value``, ``_b64``, ``_pem``...) are
    allowed; any other trailing word makes a name about a secret, not a
    secret: ``token_usage``, ``max_token_length``, ``password_policy``,
    ``cookie_count``, ``input_tokens``, ``session_id`` and ``secretary`` are not.
    """
    words = [w.lower() for w in _WORDS.findall(name)]
    while words and (words[-1].isdigit() or words[-1] in _VALUE_SUFFIXES):
        words.pop()
    if not words:
        return False
    last = words[-1].rstrip("0123456789")
    if last in _SECRET_WORDS:
        return True
    return last == "key" and len(words) > 1 and words[-2].rstrip("0123456789") not in _PLAIN_KEYS


# -- known values -------------------------------------------------------------------

_registered: tuple[str, ...] = ()
_lock = threading.Lock()
# (registered, environment fingerprint, registered + environment secrets longest first)
_known_cache: tuple[tuple[str, ...], tuple[Any, ...], tuple[str, ...]] = ((), (None,), ())


def register_secret(value: str) -> None:
    """Scrub ``value`` from everything recorded or written from now on (API keys, env values).

    Values shorter than 6 characters are ignored: replacing them would mangle ordinary words.
    """
    global _registered
    if isinstance(value, str) and len(value) >= 6 and value not in _registered:
        with _lock:
            # Longest first, so a secret containing another is replaced whole.
            _registered = tuple(sorted({*_registered, value}, key=len, reverse=True))


def replace_registered(text: str) -> str:
    """``text`` with the registered secrets replaced, and nothing else touched (cheap)."""
    for secret in _registered:  # an immutable tuple: safe to read while another thread adds
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _environment() -> tuple[Any, ...]:
    # Comparing the raw values is ~100x cheaper than decoding os.environ, and
    # catches every change a secret could come from (set, unset, replaced).
    data = getattr(os.environ, "_data", None)
    return tuple(data.values()) if isinstance(data, dict) else tuple(os.environ.values())


def _known() -> tuple[str, ...]:
    """Registered secrets and secret environment values, longest first."""
    global _known_cache
    registered, fingerprint, known = _known_cache
    current = _environment()
    if registered is _registered and fingerprint == current:
        return known
    found = {v for k, v in os.environ.items() if len(v) >= 8 and is_secret_key(k)}
    snapshot = _registered
    known = tuple(sorted(found.union(snapshot), key=len, reverse=True))
    _known_cache = (snapshot, current, known)
    return known


# -- shapes and contexts ------------------------------------------------------------

# Each alternative is a whole word: no letter or digit may touch its start or end.
_SHAPES = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"sk-ant-[A-Za-z0-9_\-]{8,}"  # Anthropic
    # OpenAI: long and random (a run of 16 letters and digits), unlike a slug.
    r"|sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*?[A-Za-z0-9]{16})[A-Za-z0-9_\-]{20,}"
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret and restricted keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abeoprs]-[A-Za-z0-9\-]{10,}"  # Slack tokens
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API keys
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"  # JWTs
    r"|gsh\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]{40,}"  # Groundswell history API tokens
    r"|hooks\.slack\.com/services/[A-Za-z0-9/]+"  # Slack webhooks
    r"|-----BEGIN[A-Z ]*PRIVATE KEY-----.*?-----END[A-Z ]*PRIVATE KEY-----"
    r")(?![A-Za-z0-9])",
    re.DOTALL,
)
# scheme://user:password@host: the password goes, the user stays.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s:/@?#]*:)[^\s@/?#]+@")
# The credential after an HTTP auth scheme.
_SCHEME = re.compile(
    r"(?<![\w\-])(?:((?i:bearer)\s+)([A-Za-z0-9._~+/\-]+=*)|((?i:basic)\s+)([A-Za-z0-9+/]+=*))"
)
# name=value, name: value, "name": "value" (and JSON escaped inside JSON text).
_ASSIGNMENT = re.compile(
    r"(?<![\w.\-])(?P<name>[A-Za-z_][\w.\-]*+)"
    r"(?P<sep>\\?[\"']?[ \t]*[:=][ \t]*)"
    r"(?P<value>\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|\\\"(?:[^\"\\\n]|\\[^\"])*\\\""
    r"|(?:(?i:bearer|basic|token|digest)[ \t]+)?[^\s\"'\\,;&<>(){}\[\]]+)"
)
_NOT_VALUES = frozenset({"", "null", "none", "nil", "true", "false", "undefined", REDACTED})
_REST_OF_LINE = re.compile(r"[^\S\n]*\w")


def _looks_random(token: str) -> bool:
    # A credential after "Bearer"/"Basic" is long, or has digits, symbols or
    # inner capitals; prose ("bearer bonds", "basic well-known rules") has none.
    if len(token) >= 16:
        return True
    return len(token) >= 8 and (
        any(c.isdigit() or c in "._~+/=" for c in token) or any(c.isupper() for c in token[1:])
    )


def _scheme(match: re.Match[str]) -> str:
    scheme, token = match.group(1, 2) if match.group(1) else match.group(3, 4)
    return scheme + REDACTED if _looks_random(token) else match.group(0)


def _assignment(match: re.Match[str]) -> str | None:
    """The match with its value redacted, or ``None`` when it holds no secret."""
    name, sep, value = match.group("name", "sep", "value")
    if not is_secret_key(name):
        return None
    quote = ""
    for q in ('\\"', '"', "'"):
        if len(value) >= 2 * len(q) and value.startswith(q) and value.endswith(q):
            quote, value = q, value[len(q) : -len(q)]
            break
    if value.lower() in _NOT_VALUES:
        return None
    if (
        not quote
        and ":" in sep
        and value.isalpha()
        and value.islower()
        and _REST_OF_LINE.match(match.string, match.end())
    ):
        # "access_token: unknown parameter": a lowercase word followed by more
        # words is prose about a secret, not one (YAML and headers end the line).
        return None
    return f"{name}{sep}{quote}{REDACTED}{quote}"


def _assignments(text: str) -> str:
    """``text`` with the values of its secret-named assignments redacted."""
    parts: list[str] = []
    done = start = 0
    while (match := _ASSIGNMENT.search(text, start)) is not None:
        replaced = _assignment(match)
        if replaced is None:
            # Look again from the value: it may hold an assignment itself
            # ("Error: password: x", or JSON quoted inside JSON).
            start = match.start("value")
            continue
        parts += (text[done : match.start()], replaced)
        done = start = match.end()
    return "".join(parts) + text[done:] if parts else text


def _text(text: str, known: tuple[str, ...]) -> str:
    # Every string of every output comes through here: each pass runs only when
    # cheap substring tests say it could match (most strings skip them all).
    if len(text) < _SHORTEST:
        return text
    for secret in known:
        if secret in text:
            text = text.replace(secret, REDACTED)
    # Every shape holds "-", "_" or "." or starts with "A" (AKIA, ASIA, AIza).
    if "-" in text or "_" in text or "." in text or "A" in text:
        text = _SHAPES.sub(REDACTED, text)
    low = text.lower()
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "bearer" in low or "basic" in low:
        text = _SCHEME.sub(_scheme, text)
    if ("=" in text or ":" in text) and (
        "key" in low
        or "token" in low
        or "pass" in low
        or "secret" in low
        or "auth" in low
        or "cookie" in low
        or "credential" in low
        or "jwt" in low
    ):
        text = _assignments(text)
    return text


def scrub(text: str) -> str:
    """``text`` with every secret the scrubber knows replaced by ``**********``.

    Registered secrets, secret environment values, credential shapes (API
    keys, JWTs, bearer tokens, URL passwords) and the values of secret-named
    assignments (``DB_PASSWORD=...``); see the module docstring for the list.
    Text of any length stays whole; ``scrub(text) != text`` tells whether
    ``text`` held a secret.
    """
    return _text(text, _known())


def scrub_json(value: Any, convert: Callable[[Any], Any] | None = None) -> Any:
    """A copy of JSON-like ``value`` (dicts, lists, scalars) with every secret removed.

    Strings are scrubbed like `scrub`; the value under a secret-named key
    (`is_secret_key`) is replaced whole unless it is ``None`` or a bool.
    Numbers stay numbers; tuples become lists. ``convert`` turns any other
    value (a model, a set, a float NaN) into JSON first; without it such
    values are kept as they are. Iterative: containers nested deeper than
    `MAX_NESTING` (only a cycle gets there) are cut off.
    """
    known = _known()
    keys = _keys_for(known)
    top: list[Any] = []  # the copy of ``value`` ends up in here
    stack: list[tuple[Any, Any, int]] = [([value], top, 0)]
    # This runs over every node of a saved tree: the common cases are inlined.
    while stack:
        source, target, depth = stack.pop()
        if type(target) is dict:
            for key, item in source.items():
                if type(key) is str:
                    found = keys.get(key)
                    if found is None:
                        found = keys[key] = (_text(key, known), is_secret_key(key))
                    key, secret = found
                    if secret and item is not None and type(item) is not bool:
                        target[key] = REDACTED
                        continue
                elif convert is not None:
                    key = str(convert(key))  # JSON keys are strings
                kind = type(item)
                if kind is str:
                    target[key] = _text(item, known) if len(item) >= _SHORTEST else item
                elif kind is int or kind is bool or item is None:
                    target[key] = item
                else:
                    target[key] = _copy(item, known, convert, stack, depth)
        else:
            for item in source:
                kind = type(item)
                if kind is str:
                    target.append(_text(item, known) if len(item) >= _SHORTEST else item)
                elif kind is int or kind is bool or item is None:
                    target.append(item)
                else:
                    target.append(_copy(item, known, convert, stack, depth))
    return top[0]


def _copy(
    item: Any,
    known: tuple[str, ...],
    convert: Callable[[Any], Any] | None,
    stack: list[tuple[Any, Any, int]],
    depth: int,
) -> Any:
    """``item`` scrubbed; a container is copied empty and queued on ``stack`` to fill."""
    kind = type(item)
    if kind is str:
        return _text(item, known) if len(item) >= _SHORTEST else item
    if kind is int or kind is bool or item is None:
        return item
    if kind is float and (item == item and item not in (_INF, -_INF)):
        return item
    if not (kind is dict or kind is list):
        if convert is not None:
            item = convert(item)
        if isinstance(item, str):
            return _text(item, known)
        if not isinstance(item, dict | list | tuple):
            return item
    copy: dict[Any, Any] | list[Any] = {} if isinstance(item, dict) else []
    if not item:
        return copy
    if depth >= MAX_NESTING:
        return TOO_DEEP
    stack.append((item, copy, depth + 1))
    return copy


def scrub_fields(records: list[dict[str, Any]], fields: tuple[str, ...]) -> list[dict[str, Any]]:
    """``records`` (changed in place) with the values of ``fields`` scrubbed by `scrub_json`.

    For the kernel's own records, whose other fields (ids, enum values,
    times) it wrote itself: walking only the free-form ones is much cheaper.
    """
    parts = scrub_json([{f: record[f] for f in fields if f in record} for record in records])
    for record, values in zip(records, parts, strict=True):
        record.update(values)
    return records


_keys: dict[str, tuple[str, bool]] = {}
_keys_known: tuple[str, ...] = ()


def _keys_for(known: tuple[str, ...]) -> dict[str, tuple[str, bool]]:
    """The cache of scrubbed dict keys and their secrecy (keys repeat a lot)."""
    global _keys, _keys_known
    if known is not _keys_known or len(_keys) > 10_000:
        _keys, _keys_known = {}, known  # a new secret may change how a key is scrubbed
    return _keys
