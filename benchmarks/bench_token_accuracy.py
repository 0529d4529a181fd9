"""Accuracy of the offline token estimate against a real Claude tokenizer.

The reference is the byte-level BPE tokenizer Anthropic published with its
Python SDK up to version 0.38 (``anthropic/tokenizer.json``; the tokenizer of
the Claude 2 models). Newer models tokenize differently and Anthropic no longer
publishes their tokenizers, so these figures say how well the estimate tracks
a real Claude BPE, not any one current model; ``counter="anthropic"`` gives
exact counts.

The sample is real text present on every machine: standard-library docstrings
(prose), standard-library source (code), JSON tool definitions built from
standard-library signatures plus ``sysconfig`` data (JSON), this project's
docs (Markdown) and, where the standard library's test data is installed, CJK
text, plus base64 and hex strings (text with no word breaks). Needs ``tokenizers`` and network access to PyPI (for the reference);
without them the result says why it was skipped.

Results go to ``DIR/token_accuracy.json``.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from _report import output_dir, write

from groundswell import estimate_tokens

REFERENCE_SDK = "anthropic==0.30.0"
ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(os.__file__).parent
CHUNK = 2_000


def chunks(text: str, size: int = CHUNK, limit: int = 20) -> list[str]:
    pieces = [text[i : i + size] for i in range(0, min(len(text), size * limit), size)]
    return [p for p in pieces if len(p) > 200]


def samples() -> dict[str, list[str]]:
    prose = []
    for name in [
        "argparse",
        "asyncio",
        "json",
        "logging",
        "collections",
        "functools",
        "typing",
        "dataclasses",
        "pathlib",
        "subprocess",
        "email",
        "unittest",
        "decimal",
        "datetime",
        "itertools",
        "re",
        "textwrap",
        "threading",
        "http.client",
        "urllib.request",
    ]:
        module = importlib.import_module(name)
        docs = [inspect.getdoc(module) or ""]
        docs += [
            doc
            for obj in vars(module).values()
            if callable(obj) and (doc := inspect.getdoc(obj)) and len(doc) > 200
        ]
        prose.append("\n\n".join(docs))
    code = [
        (STDLIB / f).read_text()
        for f in [
            "argparse.py",
            "json/decoder.py",
            "asyncio/tasks.py",
            "dataclasses.py",
            "functools.py",
            "textwrap.py",
            "shutil.py",
            "csv.py",
            "logging/__init__.py",
            "typing.py",
        ]
    ]
    data = [json.dumps(sysconfig.get_config_vars(), indent=2, default=str)]
    for name in ("json", "textwrap", "shutil", "os.path", "functools", "string"):
        module = importlib.import_module(name)
        tools = []
        for fname, obj in sorted(vars(module).items()):
            if fname.startswith("_") or not callable(obj):
                continue
            try:
                signature = inspect.signature(obj)
            except (TypeError, ValueError):
                continue
            params = signature.parameters
            tools.append(
                {
                    "name": fname,
                    "description": (inspect.getdoc(obj) or "").split("\n")[0],
                    "input_schema": {
                        "type": "object",
                        "properties": {p: {"type": "string"} for p in params},
                        "required": [p for p, v in params.items() if v.default is v.empty],
                    },
                }
            )
        data += [json.dumps(tools), json.dumps(tools, indent=2)]
    markdown = [p.read_text() for p in sorted((ROOT / "docs").glob("*.md"))]
    cjk_dir = STDLIB / "test" / "cjkencodings"
    cjk = [
        (cjk_dir / n).read_text(encoding="utf-8")
        for n in ("big5-utf8.txt", "euc_jp-utf8.txt", "cp949-utf8.txt")
        if (cjk_dir / n).exists()
    ]
    # Unbroken runs: base64 and hex of deterministic bytes, as in attachments and digests.
    blobs = [hashlib.sha512(str(i).encode()).digest() * 12 for i in range(20)]
    encoded = [base64.b64encode(b).decode() for b in blobs[:10]] + [b.hex() for b in blobs[10:]]
    return {
        "encoded": [c for t in encoded for c in chunks(t, 600)][:40],
        "prose": [c for t in prose for c in chunks(t)][:200],
        "code": [c for t in code for c in chunks(t)][:200],
        "json": [c for t in data for c in chunks(t)][:150],
        "markdown": [c for t in markdown for c in chunks(t)][:150],
        "cjk": [c for t in cjk for c in chunks(t, 600)],
    }


def reference() -> Any:
    """The reference tokenizer, fetched once from PyPI into a cache directory."""
    from tokenizers import Tokenizer

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "groundswell-bench"
    path = cache / "claude-tokenizer.json"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "-q",
                    "-d",
                    tmp,
                    REFERENCE_SDK,
                ],
                check=True,
            )
            (wheel,) = Path(tmp).glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                path.write_bytes(archive.read("anthropic/tokenizer.json"))
    return Tokenizer.from_file(str(path))


def main() -> None:
    directory = output_dir(__doc__)
    try:
        tokenizer = reference()
    except Exception as exc:  # no tokenizers package, or no PyPI: say so, do not fail the run
        write({"skipped": f"{type(exc).__name__}: {exc}"}, "token_accuracy", directory)
        return
    report: dict[str, Any] = {"reference": f"{REFERENCE_SDK} anthropic/tokenizer.json"}
    every: list[float] = []
    for kind, texts in samples().items():
        if not texts:
            report[kind] = {"samples": 0}
            continue
        errors = []
        chars = tokens = 0
        for text in texts:
            real = len(tokenizer.encode(text).ids)
            errors.append((estimate_tokens(text) - real) / real)
            chars += len(text)
            tokens += real
        every += errors
        report[kind] = {
            "samples": len(texts),
            "chars_per_token": round(chars / tokens, 2),
            "mean_error_pct": round(statistics.mean(errors) * 100, 1),
            "mean_abs_error_pct": round(statistics.mean(map(abs, errors)) * 100, 1),
            "p90_abs_error_pct": round(sorted(map(abs, errors))[int(len(errors) * 0.9)] * 100, 1),
        }
    report["all"] = {
        "samples": len(every),
        "mean_error_pct": round(statistics.mean(every) * 100, 1),
        "mean_abs_error_pct": round(statistics.mean(map(abs, every)) * 100, 1),
    }
    write(report, "token_accuracy", directory)


if __name__ == "__main__":
    main()
