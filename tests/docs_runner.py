"""Run the Python blocks of one documentation page as a reader would, and check their output.

Run by ``tests/test_docs.py``, one fresh process per page, in an empty
folder and a reader's environment (no API key, no ``ANTHROPIC_BASE_URL``: a
snippet brings its own fake, ``auto_client()`` or ``FakeAnthropicAPI``)::

    python tests/docs_runner.py docs/agents.md

``./dev test tests/test_docs.py -k agents.md`` runs one page that way.

The convention the pages follow:

- Every ```` ```python ```` block runs, in page order, in one namespace (like a
  notebook), exactly as printed, in one of two ways, chosen by the page:

  - a *script* page (no block uses top-level ``await``) runs as ``python``
    runs a script: no event loop runs between statements, and a block starts
    its async code with ``asyncio.run(...)`` (or ``run_sync``);
  - a *session* page (some block uses top-level ``await``) runs as
    ``python -m asyncio`` or a notebook runs it: every block runs inside one
    running event loop, so ``asyncio.run(...)`` there fails as it would for
    the reader.
- A block whose first line is a comment starting with ``# fragment`` is only
  compiled.
- A block whose first line is ``# file: NAME`` is a file the reader saves: it is
  compiled and written to ``NAME`` in the current folder, not run. Later blocks
  run it (``subprocess.run([sys.executable, "NAME"])``) or import it, as the
  reader would.
- A ``# file: test_NAME.py`` block is a test file: once the page's blocks have
  run, the page's test files run with pytest (pytest-asyncio in auto mode, as
  docs/testing.md sets it up), and every test must pass. Tests live only
  there: a block that runs and defines a ``test_*`` function is an error.
- A ```` ```output ```` block directly after a Python block (only blank lines
  between) is that block's expected stdout. Durations (``12.3ms``) and ids
  that vary are normalised on both sides first, and a line that is just
  ``...`` matches any number of lines.

Tracebacks point at the page itself: code is compiled with the page as its
file name and its real line numbers. On failure this prints which block
failed (number, line and first line), why, and the block's output to stderr,
and exits with status 1.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import difflib
import inspect
import io
import re
import subprocess
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TextIO

FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
FRAGMENT = re.compile(r"#\s*fragment\b", re.IGNORECASE)
FILE = re.compile(r"#\s*file:\s*(?P<name>(?:[\w.-]+/)*[\w.-]+\.py)\s*$")
NORMALISE = [
    (re.compile(r"\d+(?:\.\d+)?(?:ns|µs|us|ms|s)\b"), "<duration>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{12,}\b"), "<id>"),
    (re.compile(r"\b(msg|toolu|req)_\w+"), r"\1_<id>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?"), "<time>"),
]


@dataclass
class Block:
    """One python block of the page, with the output its page shows, if any."""

    number: int  # 1-based, counting the page's python blocks only
    start: int  # line number of the opening fence (1-based)
    end: int  # line number of the closing fence
    code: str
    expected: str | None = None

    @property
    def first_line(self) -> str:
        return next((line for line in self.code.splitlines() if line.strip()), "").strip()

    @property
    def is_fragment(self) -> bool:
        return bool(FRAGMENT.match(self.first_line))

    @property
    def is_test_file(self) -> bool:
        return bool(self.file_name and Path(self.file_name).name.startswith("test_"))

    @property
    def file_name(self) -> str | None:
        """The name a ``# file: NAME`` block is saved under, or None for a block that runs."""
        saved = FILE.match(self.first_line)
        return saved["name"] if saved else None

    def where(self, page: Path) -> str:
        return f"{shown(page)} block {self.number} (line {self.start}: `{self.first_line}`)"


def shown(page: Path) -> str:
    """The page's path from the repository root, as messages name it."""
    root = Path(__file__).resolve().parent.parent
    return str(page.relative_to(root)) if page.is_relative_to(root) else str(page)


class PageError(Exception):
    """The page breaks the convention (an unclosed fence, an orphan output block)."""


def parse(page: Path) -> list[Block]:
    """The page's Python blocks, each with the output block that follows it, if any."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    previous: Block | None = None
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        info = opening["info"].split()[0].lower() if opening["info"] else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if (
                closing
                and not closing["info"]
                and closing["fence"][0] == fence[0]
                and len(closing["fence"]) >= len(fence)
            ):
                break
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            j += 1
        else:
            raise PageError(f"{shown(page)}:{i + 1}: the ```{info} block is never closed")
        code = "\n".join(body) + "\n"
        if info == "output":
            between = lines[previous.end : i] if previous else ["not blank"]
            if previous is None or any(line.strip() for line in between):
                raise PageError(
                    f"{shown(page)}:{i + 1}: an ```output block must come right after a ```python "
                    "block (only blank lines between)"
                )
            if previous.is_fragment:
                raise PageError(f"{previous.where(page)} is a fragment but has an output block")
            if previous.file_name:
                raise PageError(f"{previous.where(page)} is a file but has an output block")
            previous.expected = code
            previous = None
        elif info == "python":
            previous = Block(len(blocks) + 1, i + 1, j + 1, code)
            blocks.append(previous)
        else:
            previous = None
        i = j + 1
    return blocks


def awaits_at_top_level(code: types.CodeType) -> bool:
    """Whether a block compiled with top-level ``await`` allowed uses it (it is then a
    coroutine's code, as in ``python -m asyncio``)."""
    return bool(code.co_flags & inspect.CO_COROUTINE)


def defines_tests(block: Block) -> list[str]:
    """The ``test_*`` functions a block defines at its top level."""
    tree = ast.parse(block.code)
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.name.startswith("test_")
    ]


def normalise(text: str) -> list[str]:
    """Lines of ``text`` with durations and ids replaced, trailing space and blank lines gone."""
    for pattern, replacement in NORMALISE:
        text = pattern.sub(replacement, text)
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    while lines and not lines[0]:
        lines.pop(0)
    return lines


def matches(expected: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` fits ``expected``, where a ``...`` line stands for any lines."""
    memo: dict[tuple[int, int], bool] = {}

    def fit(e: int, a: int) -> bool:
        if (e, a) not in memo:
            if e == len(expected):
                memo[e, a] = a == len(actual)
            elif expected[e].strip() == "...":
                memo[e, a] = any(fit(e + 1, k) for k in range(a, len(actual) + 1))
            else:
                memo[e, a] = a < len(actual) and expected[e] == actual[a] and fit(e + 1, a + 1)
        return memo[e, a]

    return fit(0, 0)


class Tee(io.TextIOBase):
    """Writes go to the real stream and are kept, so each block's stdout can be checked."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.kept = io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        return self.kept.write(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding


def fail(message: str) -> NoReturn:
    sys.stdout.flush()
    print(message, file=sys.stderr)
    sys.exit(1)


def compile_block(page: Path, block: Block) -> types.CodeType:
    """The block's code, with the page as its file name and the page's line numbers."""
    try:
        tree: ast.Module = compile(
            block.code,
            str(page),
            "exec",
            flags=ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
            dont_inherit=True,
        )
    except SyntaxError as exc:
        lines = block.code.splitlines()
        if exc.lineno and exc.lineno <= len(lines):
            exc.text = lines[exc.lineno - 1] + "\n"  # not the page's line of that number
        exc.lineno = (exc.lineno or 0) + block.start
        exc.end_lineno = (exc.end_lineno or exc.lineno) + block.start
        raise
    ast.increment_lineno(tree, block.start)
    code: types.CodeType = compile(
        tree, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    return code


def run_page(page: Path) -> int:
    """Run every block of ``page``; return how many ran (fragments are only compiled)."""
    try:
        blocks = parse(page)
    except PageError as exc:
        fail(f"docs_runner: {exc}")
    compiled: list[types.CodeType] = []
    for block in blocks:
        try:
            compiled.append(compile_block(page, block))
        except SyntaxError as exc:
            shown_error = "".join(traceback.format_exception_only(exc))
            fail(f"{block.where(page)} is not valid Python:\n{shown_error}")
        if block.file_name:  # a file runs as a module or a script: no top-level await
            try:
                compile(block.code, block.file_name, "exec", dont_inherit=True)
            except SyntaxError as exc:
                fail(f"{block.where(page)} is a file but not valid Python as one: {exc}")
        elif not block.is_fragment and (tests := defines_tests(block)):
            fail(
                f"{block.where(page)} defines {', '.join(tests)}: a test goes in a block whose "
                "first line is `# file: test_NAME.py` (saved and run with pytest), so it is a "
                "valid test file as printed"
            )
    runnable = [
        (b, c) for b, c in zip(blocks, compiled, strict=True) if not (b.is_fragment or b.file_name)
    ]
    # One way of running for the whole page, as the reader has one environment for it.
    session = any(awaits_at_top_level(code) for _, code in runnable)

    # The page's code runs as the __main__ module of `python page.py` in the current folder.
    script = str(Path.cwd() / "page.py")
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __file__=script)
    sys.modules.setdefault("docs_runner", sys.modules["__main__"])  # this runner, kept
    sys.modules["__main__"] = main
    sys.argv = [script]
    sys.path[0] = str(Path.cwd())  # not this runner's folder
    loop = asyncio.new_event_loop()
    real_stdout = sys.stdout
    ran = 0
    last = runnable[-1][0] if runnable else None
    for block, code in zip(blocks, compiled, strict=True):
        if block.is_fragment:
            continue
        if block.file_name:
            Path(block.file_name).parent.mkdir(parents=True, exist_ok=True)  # a package's
            Path(block.file_name).write_text(block.code, encoding="utf-8")
            continue
        exited = False
        tee = Tee(real_stdout)
        sys.stdout = tee
        try:
            if session:  # inside the running loop, as `python -m asyncio` runs each input
                asyncio.set_event_loop(loop)
                loop.run_until_complete(_in_loop(code, main.__dict__))
            else:  # as `python` runs a script: no loop runs here
                eval(code, main.__dict__)
        except SystemExit as exc:
            exited = exc.code in (None, 0)  # a script may end with sys.exit(0)
            if not exited or block is not last:
                sys.stdout = real_stdout
                fail(f"{block.where(page)} exits ({exc!r}) before the page ends\n{_printed(tee)}")
        except BaseException as exc:  # KeyboardInterrupt too
            sys.stdout = real_stdout
            fail(f"{block.where(page)} raised:\n{_traceback(exc, page)}\n{_printed(tee)}")
        finally:
            sys.stdout = real_stdout
        ran += 1
        if block.expected is not None:
            check_output(page, block, tee.kept.getvalue())
        if exited:
            break
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()
    run_test_files(page, [block for block in blocks if block.is_test_file])
    return ran


async def _in_loop(code: types.CodeType, namespace: dict[str, object]) -> None:
    result = eval(code, namespace)
    if asyncio.iscoroutine(result):
        await result


# The reader's pytest set up as docs/testing.md says: async tests run by pytest-asyncio.
PYTEST = [
    "-m", "pytest", "-q", "-p", "no:cacheprovider",
    "-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function",
]  # fmt: skip


def run_test_files(page: Path, tests: list[Block]) -> None:
    """Run the page's test files with pytest, as the reader would once they are saved."""
    if not tests:
        return
    names = [block.file_name or "" for block in tests]
    out = subprocess.run(
        [sys.executable, *PYTEST, *names], capture_output=True, text=True, check=False
    )
    print(out.stdout, end="")
    if out.returncode != 0:
        fail(
            f"{shown(page)}: its test files ({', '.join(names)}) fail under pytest "
            f"(exit {out.returncode}):\n{out.stdout}{out.stderr}"
        )


def check_output(page: Path, block: Block, printed: str) -> None:
    """Fail unless what ``block`` printed fits its output block."""
    assert block.expected is not None
    expected, actual = normalise(block.expected), normalise(printed)
    if not matches(expected, actual):
        diff = "\n".join(
            difflib.unified_diff(expected, actual, "shown on the page", "printed", lineterm="")
        )
        fail(
            f"{block.where(page)} printed something other than its output block "
            f"(durations and ids normalised; `...` matches any lines):\n{diff}"
        )


def _traceback(exc: BaseException, page: Path) -> str:
    """The traceback from the page's own frame on (not this runner's or asyncio's)."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != str(page):
        tb = tb.tb_next
    return "".join(traceback.format_exception(exc.with_traceback(tb or exc.__traceback__)))


def _printed(tee: Tee) -> str:
    text = tee.kept.getvalue()
    return f"What the block printed before that:\n{text}" if text else "It printed nothing."


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        sys.exit("usage: python tests/docs_runner.py docs/PAGE.md")
    page = Path(argv[0]).resolve()
    ran = run_page(page)
    print(f"docs_runner: {shown(page)}: python blocks run: {ran}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
