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
   not an ``sk-`` key): Anthropic, OpenAI, Stripe, GitHub, GitLab, Slack,
   Google, PyPI, Hugging Face and SendGrid keys, AWS access key ids, JWTs,
   Groundswell history API tokens, Slack webhook URLs. A word may also start
   right after a JSON escape (``\\n``: text that was JSON-encoded) or a URL
   escape (``%3D``: ``key%3Dsk-ant-...``).
3. PEM private keys: a whole block, a block cut short (no END line: its
   base64 lines go), and the second half of a block (base64 lines ending in
   ``-----END ... PRIVATE KEY-----``), with line breaks as they are or
   JSON-escaped.
4. Credentials by their context: the token after ``Bearer`` / ``Basic``, the
   password in ``scheme://user:password@host`` and in ``curl -u user:password``,
   the ``sig=`` of a signed URL (Azure SAS, ``X-Amz-Signature=``), the value
   of ``name=value``, ``name: value`` or ``"name": "value"`` when ``name`` is
   a secret name (``DB_PASSWORD=``, ``?access_token=``, ``"api_key":``,
   ``--token=``, ``api_key%3D``), and the value after a secret-named command
   line flag (``--api-key VALUE``).
5. In structures, the whole value under a secret-named key (`is_secret_key`).
   A command line to record (an MCP server's ``args``) goes through
   `scrub_argv`.

Look-alikes survive: ``token_usage``, ``max_token_length``, ``session_id``,
``cookie_count`` or ``password_policy`` are names *about* a secret, not
secrets; UUIDs, git SHAs and cache keys match no shape.
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

__all__ = [
    "REDACTED",
    "argv_secrets",
    "is_secret_field",
    "is_secret_key",
    "register_secret",
    "replace_registered",
    "scrub",
    "scrub_argv",
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


@functools.lru_cache(maxsize=1024)
def is_secret_field(name: str) -> bool:
    """`is_secret_key`, remembered per name: for the few field names a request has."""
    return is_secret_key(name)


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

# Where a credential may start: after no letter or digit (a whole word), or right
# after a JSON escape ("notes:\\nsk-ant-...": text that was JSON-encoded, whose
# "\n" ends in a letter) or a URL escape ("key%3Dsk-ant-...").
_WORD_START = r"(?:(?<![A-Za-z0-9])|(?<=\\[nrt])|(?<=%[0-9A-Fa-f]{2}))"
# A name may start with any letter, so an assignment's pattern looks behind escapes
# in a second pass, for text with escapes (a backslash or a percent sign in it),
# that starts with the escape itself: the engine only stops where there is one.
# Each is a pair (plain, after an escape); the plain one is the one plain text
# always had.
_ESCAPE = r"(?:\\[nrt]|%[0-9A-Fa-f]{2})"


def _pair(plain: str, body: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    return re.compile(plain + body), re.compile(_ESCAPE + body)


# Each alternative is a whole word: no letter or digit may touch its start or end.
_SHAPES = re.compile(
    # The shapes' first two letters: the engine passes most positions at once.
    r"(?=[AShegprsx][GIKSfhiklosy])" + _WORD_START + r"(?:"
    r"sk-ant-[A-Za-z0-9_\-]{8,}"  # Anthropic
    # OpenAI: long and random (a run of 16 letters and digits), unlike a slug.
    r"|sk-(?:proj-|svcacct-|admin-)?(?=[A-Za-z0-9_\-]*?[A-Za-z0-9]{16})[A-Za-z0-9_\-]{20,}"
    r"|(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe secret and restricted keys
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|xox[abeoprs]-[A-Za-z0-9\-]{10,}"  # Slack tokens
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API keys
    # PyPI upload tokens: macaroons, whose base64 always starts "AgE" (not "pypi-server").
    r"|pypi-AgE[A-Za-z0-9_\-]{40,}"
    # Hugging Face: hf_ and a long run of mixed-case letters (not hf_hub_download).
    r"|hf_(?=[a-z0-9]*[A-Z])[A-Za-z0-9]{30,}"
    r"|SG\.[A-Za-z0-9_\-]{16,32}\.[A-Za-z0-9_\-]{32,64}"  # SendGrid (not SG.com)
    r"|eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*"  # JWTs
    r"|gsh\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]{40,}"  # Groundswell history API tokens
    r"|hooks\.slack\.com/services/[A-Za-z0-9/]+"  # Slack webhooks
    r")(?![A-Za-z0-9])"
)
# A line break in a PEM block: as it is, or JSON-escaped once or more (a key in a
# tool's JSON result, itself inside a span's JSON attribute).
_BREAK = r"(?:\r?\n|\\+r\\+n|\\+n|\\+r)"
_PEM_LABEL = r"[A-Z ]*PRIVATE KEY(?: BLOCK)?-----"
_PEM_BLOCK = re.compile(
    r"-----BEGIN" + _PEM_LABEL + r"(?:"
    # A whole block (a BEGIN cut short takes no later block's END with it).
    r"(?:(?!-----BEGIN).)*?-----END" + _PEM_LABEL + r"|"
    # No END line (cut short): its headers and its base64 lines, up to the first
    # line that is not one ("Thanks for" is prose: base64 has no spaces).
    r"(?:[ \t]*" + _BREAK + r"[ \t]*"
    r"(?:(?:Proc-Type|DEK-Info|Comment):[^\r\n\\]*|[A-Za-z0-9+/=]++(?![ \t]*[A-Za-z0-9+/=])))*+"
    r")",
    re.DOTALL,
)
# The second half of a block split in two (no BEGIN): base64 lines ending in its END
# line. Looked for in the 8 KiB before each END line (a 4096-bit RSA key has 3.2).
_PEM_END = re.compile(r"-----END" + _PEM_LABEL)
_PEM_TAIL = re.compile(
    r"(?:(?<![A-Za-z0-9+/=\\])|(?<=\\[nrt]))"
    r"(?:[A-Za-z0-9+/=]++[ \t]*" + _BREAK + r"[ \t]*)++-----END" + _PEM_LABEL
)
_PEM_WINDOW = 8192
# scheme://user:password@host: the password goes, the user stays.
_URL_PASSWORD = re.compile(r"(?i)(\b[a-z][a-z0-9+.\-]*://[^\s:/@?#]*:)[^\s@/?#]+@")
# curl -u user:password (--user, --proxy-user, -U): the password goes, the user stays.
# The flag is curl's first -u (a later one is another command's: docker run -u 0:0),
# as shell text or an argv list ("curl", "-u", "user:password").
_CURL_FLAG = r"(?<![\w\-])-(?:u|U|-user|-proxy-user)"
_CURL_USER = re.compile(
    r"[cC](?:(?<![A-Za-z0-9][cC])|(?<=\\[nrt][cC]))(?i:url)\b"
    # Up to curl's first -u: a span that holds no -u flag.
    + rf"(?:(?!{_CURL_FLAG})[^\r\n;|])*+{_CURL_FLAG}"
    # Its user (the quote and comma of an argv list allowed) and the password to replace.
    + r"(?:\\*[\"'])?(?:,[ \t]*|[ \t]+|=)?(\\*[\"']?[^\s:\"'\\]*:)([^\s\"'\\]+)"
)
# The signature of a signed URL (an Azure SAS token's sig=, S3 and GCS presigned URLs).
_URL_SIGNATURE = re.compile(
    r"([?&;](?i:sig|signature|x-amz-signature|x-goog-signature)(?:=|%3[Dd]))[^&\s#\"'<>\\]+"
)
# The credential after an HTTP auth scheme.
_SCHEME = re.compile(
    r"(?=[bB][eEaA])(?:(?<![\w\-])|(?<=\\[nrt]))"
    r"(?:((?i:bearer)\s+)([A-Za-z0-9._~+/\-]+=*)|((?i:basic)\s+)([A-Za-z0-9+/]+=*))"
)
# A quoted value: "..." or '...', or \"...\" (JSON-escaped once or more: JSON text in JSON).
_QUOTED = r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|\\+\"(?:[^\"\\\n]|\\+[^\"\\\n])*+\\+\""
_SEPARATOR = r"\\*[\"']?[ \t]*(?:[:=]|%3[DdAa])[ \t]*"
_VALUE = _QUOTED + r"|(?:(?i:bearer|basic|token|digest)[ \t]+)?[^\s\"'\\,;&<>(){}\[\]]+"
# name=value, name: value, "name": "value" (and JSON escaped inside JSON text),
# URL-encoded name%3Dvalue.
_ASSIGNMENT = _pair(
    r"(?<![\w.\-])",
    rf"(?P<name>[A-Za-z_][\w.\-]*+)(?P<sep>{_SEPARATOR})(?P<value>{_VALUE})",
)
# A command line's flag and its value: --name=value, --name value (the value no
# other flag), -name value. It starts with its dash (the engine jumps from dash to dash).
_FLAG_BODY = rf"(?P<name>-?[A-Za-z_][\w.\-]*+)(?P<sep>{_SEPARATOR}|[ \t]++(?!-))(?P<value>{_VALUE})"
_FLAG = re.compile(r"-(?<![\w.\-]-)" + _FLAG_BODY), re.compile(_ESCAPE + "-" + _FLAG_BODY)
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


def _pem_tails(text: str) -> str:
    """``text`` with the second halves of PEM private key blocks redacted."""
    parts: list[str] = []
    done = 0
    for end in _PEM_END.finditer(text):
        found = _PEM_TAIL.search(text, max(done, end.start() - _PEM_WINDOW), end.end())
        if found is not None:
            parts += (text[done : found.start()], REDACTED)
            done = found.end()
    return "".join(parts) + text[done:] if parts else text


def _assignment(match: re.Match[str]) -> str | None:
    """The match with its value redacted, or ``None`` when it holds no secret."""
    name, sep, value = match.group("name", "sep", "value")
    if not is_secret_key(name):
        return None
    quote = ""
    if value[:1] in ("'", '"', "\\"):
        q = value[: len(value) - len(value.lstrip("\\")) + 1]
        if q[-1:] in ("'", '"') and len(value) >= 2 * len(q) and value.endswith(q):
            quote, value = q, value[len(q) : -len(q)]
    if value.lower() in _NOT_VALUES:
        return None
    if (
        not quote
        and (":" in sep or sep.isspace())
        and value.isalpha()
        and value.islower()
        and _REST_OF_LINE.match(match.string, match.end())
    ):
        # "access_token: unknown parameter", "the --token flag sets it": a lowercase
        # word followed by more words is prose about a secret, not one (YAML,
        # headers and command lines end the line or go on with a flag).
        return None
    return f"{name}{sep}{quote}{REDACTED}{quote}"


def _assignments(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` with the values of its secret-named assignments (and flags) redacted."""
    parts: list[str] = []
    done = start = 0
    while (match := pattern.search(text, start)) is not None:
        replaced = _assignment(match)
        if replaced is None:
            # Look again from the value: it may hold an assignment itself
            # ("Error: password: x", or JSON quoted inside JSON).
            start = match.start("value")
            continue
        parts += (text[done : match.start("name")], replaced)
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
    if "PRIVATE KEY" in text:
        text = _PEM_BLOCK.sub(REDACTED, text)
        if "-----END" in text:
            text = _pem_tails(text)
    # Every shape holds "-", "_" or "." or starts with "A" (AKIA, ASIA, AIza).
    if "-" in text or "_" in text or "." in text or "A" in text:
        text = _SHAPES.sub(REDACTED, text)
    low = text.lower()
    if "://" in text and "@" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if "bearer" in low or "basic" in low:
        text = _SCHEME.sub(_scheme, text)
    if "curl" in low and ("-u" in text or "-U" in text) and ":" in text:
        text = _CURL_USER.sub(lambda m: f"{m.string[m.start() : m.start(2)]}{REDACTED}", text)
    if "sig" in low and ("=" in text or "%3" in text):
        text = _URL_SIGNATURE.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    if (
        "key" in low
        or "token" in low
        or "pass" in low
        or "secret" in low
        or "auth" in low
        or "cookie" in low
        or "credential" in low
        or "jwt" in low
    ):
        # After the plain pass, the one behind JSON and URL escapes, when there may be some.
        escaped = "\\" in text or "%" in text
        if "=" in text or ":" in text or "%3" in text:
            text = _assignments(text, _ASSIGNMENT[0])
            if escaped:
                text = _assignments(text, _ASSIGNMENT[1])
        if "-" in text:
            text = _assignments(text, _FLAG[0])
            if escaped:
                text = _assignments(text, _FLAG[1])
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


def _argv_values(args: Sequence[str]) -> Iterator[tuple[int, str]]:
    """``(index, prefix)`` of each argument holding a secret, its secret after ``prefix``."""
    after_flag = False
    for i, arg in enumerate(args):
        if after_flag and not arg.startswith("--"):
            yield i, ""  # --password VALUE
            after_flag = False
            continue
        after_flag = False
        if arg.startswith("-") and len(arg) > 2:
            joined = arg[2:]
            # -pVALUE: a password joined to its flag (mysql, sshpass), whatever it
            # holds (-pMyKey_1 is no "key" flag); a word of lowercase letters is an
            # option (-print, -pthread, -password VALUE).
            if arg[1] == "p" and not (joined.isalpha() and joined.islower()):
                yield i, "-p"
                continue
            name, equals, value = arg.partition("=")
            if is_secret_key(name) and not name.startswith("--no-"):  # --no-auth takes no value
                if not equals:
                    after_flag = True
                elif value:
                    yield i, name + equals  # --token=VALUE
        # "-p VALUE" stays: a port, a path or a database name, not a password.


def scrub_argv(args: Sequence[str]) -> list[str]:
    """A copy of a command line's arguments fit to record or log; the command runs with ``args``.

    The value of a secret-named flag goes (``--api-key VALUE``, ``--token=VALUE``,
    ``-password VALUE``; `is_secret_key` names them), and so does a password
    joined to ``-p`` (``-pVALUE``, as mysql and sshpass take it; ``-p 8080``
    stays, and so do ``-print`` and ``-pthread``). Every argument then goes
    through `scrub`.
    """
    out = list(args)
    for i, prefix in _argv_values(args):
        out[i] = prefix + REDACTED
    known = _known()
    return [_text(arg, known) for arg in out]


def argv_secrets(args: Sequence[str]) -> list[str]:
    """The secret values `scrub_argv` takes out of ``args``, to `register_secret` them.

    Leaves out a value that does not look random (``--auth OAuth2``) and a path
    (``--ssh-key ~/.ssh/id_ed25519``): a mode or a file rather than a credential,
    and registered it would be replaced everywhere. `scrub_argv` still hides them.
    """
    values = [args[i][len(prefix) :] for i, prefix in _argv_values(args)]
    return [v for v in values if _looks_random(v) and not v.startswith(("/", "~", "./", "../"))]


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
