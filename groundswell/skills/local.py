"""Local skills: a folder with a ``SKILL.md`` in the Agent Skills format.

``SKILL.md`` starts with YAML front matter (``name``, ``description`` and the
optional ``license``, ``compatibility``, ``metadata`` and ``allowed-tools``)
and goes on with the skill's instructions. The model sees every skill's name
and description in the system prompt and reads the rest on demand with the
``read_skill`` tool: the instructions, then any file of the skill's folder
(references, scripts, assets). Nothing here runs a skill's scripts.
"""

from __future__ import annotations

import base64
import codecs
import json
import os
import re
import unicodedata
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from ..model.settings_check import check_api_item
from ..tools.tool import Tool, ToolFailed

if TYPE_CHECKING:
    import yaml

__all__ = [
    "MAX_TEXT_CHARS",
    "Skill",
    "check_skills",
    "skills_system_text",
    "skills_tool",
    "warn_missing_tools",
]

#: The most characters of one file ``read_skill`` returns; the rest is cut with a note.
MAX_TEXT_CHARS = 100_000
#: The most files listed for the model under a skill's instructions.
MAX_LISTED = 100
#: The most files a folder walk visits: a skill with a huge tree stays cheap to list.
_MAX_WALKED = 5_000
#: Images up to the API's size limit go back as image blocks the model can see.
_MAX_IMAGE_BYTES = 5 * 1024 * 1024
_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
# Folders no skill's reader needs listed: caches and installed packages.
_SKIPPED_DIRS = frozenset({"__pycache__", "node_modules"})
_MAX_NAME = 64
_FRONT = re.compile(r"\A\ufeff?---[ \t]*\r?\n(.*?)^---[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.MULTILINE)
# allowed-tools entries are split on spaces and commas, except inside a rule's
# parentheses: "Bash(git add:*), Read" is two entries.
_TOOL_ENTRY = re.compile(r"[^\s,(]+(?:\([^)]*\))?")


class Skill:
    """A local skill: a folder with a ``SKILL.md`` (YAML front matter, then instructions).

    Its front matter is read as YAML and checked against the skills format: a
    ``name`` of at most 64 lowercase letters, digits and single hyphens that
    matches the folder's name, and a non-empty ``description``; ``license``,
    ``compatibility``, ``metadata`` (strings by key) and ``allowed-tools``
    are optional. Other fields are kept in `front_matter`. A bad ``SKILL.md``
    raises `ConfigurationError` naming the file, the field and the fix.

    The model sees the name and description in the system prompt and reads
    the instructions and the folder's files with the ``read_skill`` tool.
    Groundswell never runs a skill's scripts; the model runs one only through
    a tool of the agent's that executes code.
    """

    #: The skill's name (its folder's name).
    name: str
    #: What the skill does and when to use it, as the model sees it.
    description: str
    #: The instructions: ``SKILL.md`` after its front matter.
    body: str
    #: The ``SKILL.md`` file.
    path: Path
    #: The skill's folder (resolved): ``read_skill`` serves files inside it only.
    folder: Path
    #: ``license``: a license name or the name of a bundled license file.
    license: str | None
    #: ``compatibility``: the environment the skill needs (packages, network, product).
    compatibility: str | None
    #: ``metadata``: extra properties, strings by key (other values as JSON text).
    metadata: dict[str, str]
    #: ``allowed-tools``: tools the skill may use without asking, e.g. ``("Bash(git:*)", "Read")``.
    allowed_tools: tuple[str, ...]
    #: The whole front matter as YAML gives it, other fields included.
    front_matter: dict[str, Any]

    def __init__(self, path: str | os.PathLike[str]) -> None:
        given = Path(path)
        where = f"Skill({str(path)!r})"
        file = _skill_file(given)
        if file is None:
            raise ConfigurationError(
                f"{where}: no SKILL.md there; pass a skill's folder (the one holding its "
                "SKILL.md) or the SKILL.md file itself"
            )
        try:
            text = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(f"{where}: cannot read {file.name}: {exc}") from exc
        match = _FRONT.match(text)
        if match is None:
            raise ConfigurationError(
                f"{where}: SKILL.md must start with YAML front matter between two '---' lines, "
                "holding at least name: and description:"
            )
        fields, self.front_matter = _parse_front_matter(match.group(1), where)
        self.path = file
        self.folder = file.parent.resolve()
        self.name = _check_name(fields, self.folder.name, where)
        description = _text(fields, "description", where)
        if not description:
            raise ConfigurationError(
                f"{where}: description is missing or empty; add description: saying what the "
                "skill does and when to use it (the model chooses skills by it)"
            )
        self.description = description
        self.license = _text(fields, "license", where) or None
        self.compatibility = _text(fields, "compatibility", where) or None
        self.metadata = _metadata(fields.get("metadata"), where)
        self.allowed_tools = _allowed_tools(fields.get("allowed-tools"), where)
        self.body = text[match.end() :].strip()

    def files(self) -> list[str]:
        """The files of the skill's folder as relative POSIX paths, sorted (``SKILL.md`` too).

        Hidden files and folders, ``__pycache__`` and ``node_modules`` are left
        out, and so are symlinks that lead outside the folder or to a hidden
        file, and symlinks that loop.
        """
        return sorted(_walk(self.folder))

    def read(self, path: str | None = None) -> str | list[dict[str, Any]]:
        """What ``read_skill`` returns: the instructions (``path=None``) or one file's content.

        The instructions end with a list of the folder's other files. A text
        file comes back as text (cut at `MAX_TEXT_CHARS` with a note), a PNG,
        JPEG, GIF or WebP image as an image block, another binary file as a note.
        Raises `groundswell.ToolFailed` for a path outside the folder
        (absolute, with ``..``, hidden, or a symlink leading out or to a hidden
        file), a symlink that loops, one that is not a regular file (a FIFO, a
        device) or one that is not there.
        """
        if path is None or path == "":  # models fill optional arguments with "" too
            return self._instructions()
        target, shown, guessed = self._locate(path)
        if target == self.folder:
            return f"The folder of skill {self.name!r}. " + _listing(self.name, self.files())
        if target.is_dir():
            inside = [f for f in self.files() if f.startswith(f"{shown}/")]
            return f"{shown}/ is a folder of skill {self.name!r}. " + _listing(self.name, inside)
        if not target.is_file():  # a FIFO or a device: open() could wait forever
            raise ToolFailed(
                f"read_skill: {shown!r} of skill {self.name!r} is not a regular file; "
                "only files and folders are served"
            )
        note = f"(no file {path!r}; this is {shown!r})\n" if guessed else ""
        return _content(target, shown, note)

    def _instructions(self) -> str:
        others = [f for f in self.files() if f != self.path.name]
        if not others:
            return _bounded(self.body)
        return (
            f"{_bounded(self.body)}\n\n---\n"
            f"This skill's folder is {self.folder}. " + _listing(self.name, others) + "\n"
            "Reading a script does not run it: run one only with a tool you have that "
            "executes commands."
        )

    def _locate(self, path: str) -> tuple[Path, str, bool]:
        """The file ``path`` names inside the folder, its relative path, and whether guessed."""
        if not isinstance(path, str) or not path.strip() or "\x00" in path:
            raise ToolFailed(
                f"read_skill: path must be a file of skill {self.name!r}, got {path!r}"
            )
        posix = path.strip().replace("\\", "/")
        relative = PurePosixPath(posix)
        if relative.is_absolute() or PureWindowsPath(path).drive or posix.startswith("/"):
            raise ToolFailed(self._outside(path, "it is absolute"))
        if ".." in relative.parts:
            raise ToolFailed(self._outside(path, "it climbs out with '..'"))
        if _hidden(relative.parts):
            raise ToolFailed(self._hidden(path))
        shown = relative.as_posix()
        target = _resolved(self.folder / relative)
        if target is None:
            # No absolute path in the message: the model needs only the path it gave.
            raise ToolFailed(
                f"read_skill: {path!r} of skill {self.name!r} cannot be read: it is a symlink "
                "that loops or cannot be followed"
            )
        if not target.is_relative_to(self.folder):
            raise ToolFailed(self._outside(path, "a symlink leads out of it"))
        if _hidden(target.relative_to(self.folder).parts):  # a symlink to a hidden file
            raise ToolFailed(self._hidden(path))
        if target.exists():
            return target, shown, False
        # Instructions often name a file in another case ("FORMS.md" for forms.md).
        same = [f for f in self.files() if f.casefold() == shown.casefold()]
        if len(same) == 1:
            return (self.folder / same[0]).resolve(), same[0], True
        raise ToolFailed(
            f"read_skill: skill {self.name!r} has no file {path!r}. "
            + _listing(self.name, [f for f in self.files() if f != self.path.name])
        )

    def _hidden(self, path: str) -> str:
        return (
            f"read_skill: {path!r} is hidden; hidden files of a skill's folder (names starting "
            "with '.', __pycache__, node_modules, or a symlink to one of them) are not served"
        )

    def _outside(self, path: str, why: str) -> str:
        return (
            f"read_skill: {path!r} is not inside the folder of skill {self.name!r} ({why}); "
            "give a path relative to the skill's folder, such as 'reference/api.md'"
        )

    def __repr__(self) -> str:
        return f"Skill({self.name!r})"


def _skill_file(given: Path) -> Path | None:
    if given.is_file():
        return given
    for name in ("SKILL.md", "skill.md"):
        if (given / name).is_file():
            return given / name
    return None


def _parse_front_matter(front: str, where: str) -> tuple[dict[str, yaml.Node], dict[str, Any]]:
    """The front matter's fields as YAML nodes (their text exactly), and as Python values."""
    import yaml  # only skills need it: importing groundswell stays light

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        # Aliases are refused before anything is built: nested ones expand
        # exponentially (an "alias bomb"), and front matter never needs them.
        if any(
            isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None)
            for event in yaml.parse(front, Loader=loader)
        ):
            raise ConfigurationError(
                f"{where}: the front matter of SKILL.md uses a YAML anchor or alias "
                "('&name', '*name'); write each value out in full"
            )
        root = yaml.compose(front, Loader=loader)
        values = yaml.load(front, Loader=loader)
    except yaml.YAMLError as exc:
        raise ConfigurationError(
            f"{where}: the front matter of SKILL.md is not valid YAML: {exc}; quote a value "
            "that holds ': ' or starts with a special character, or use a '|' block"
        ) from exc
    if not isinstance(root, yaml.MappingNode):
        raise ConfigurationError(
            f"{where}: the front matter of SKILL.md must be YAML fields (name: ..., "
            "description: ...), not a single value or a list"
        )
    fields: dict[str, yaml.Node] = {}
    for key, value in root.value:
        label = str(key.value) if isinstance(key, yaml.ScalarNode) else "?"
        if label in fields:
            raise ConfigurationError(
                f"{where}: the front matter of SKILL.md sets {label}: twice; keep one"
            )
        fields[label] = value
    return fields, dict(values)


def _scalar(node: yaml.Node | None) -> str | None:
    """A scalar's text as written (after YAML's quoting, escapes and folding); None when null."""
    import yaml

    if not isinstance(node, yaml.ScalarNode) or _is_null(node):
        return None
    return str(node.value)


def _text(fields: Mapping[str, yaml.Node], key: str, where: str) -> str:
    import yaml

    node = fields.get(key)
    if node is not None and not isinstance(node, yaml.ScalarNode):
        raise ConfigurationError(
            f"{where}: {key}: in SKILL.md must be text, not a list or a map; write it on one "
            "line, or as a '|' block"
        )
    return (_scalar(node) or "").strip()


def _check_name(fields: Mapping[str, yaml.Node], folder: str, where: str) -> str:
    name = unicodedata.normalize("NFKC", _text(fields, "name", where))
    fix = f"name: {folder}" if _valid_name(folder) else "name: my-skill (in a folder my-skill)"
    if not name:
        raise ConfigurationError(f"{where}: name is missing from SKILL.md; add {fix}")
    problem = _name_problem(name)
    if problem:
        raise ConfigurationError(
            f"{where}: name {name!r} in SKILL.md {problem}; a skill's name is at most "
            f"{_MAX_NAME} lowercase letters, digits and single hyphens, e.g. pdf-forms"
        )
    if unicodedata.normalize("NFKC", folder) != name:
        raise ConfigurationError(
            f"{where}: name {name!r} in SKILL.md does not match its folder {folder!r}; the "
            f"skills format requires them to be equal: rename the folder to {name!r}"
            + (f" or set name: {folder}" if _valid_name(folder) else "")
        )
    return name


def _name_problem(name: str) -> str | None:
    if len(name) > _MAX_NAME:
        return f"has {len(name)} characters (at most {_MAX_NAME})"
    if name != name.lower():
        return "has capital letters"
    bad = sorted({c for c in name if not (c.isalnum() or c == "-")})
    if bad:
        return f"holds {''.join(bad)!r}"
    if name.startswith("-") or name.endswith("-"):
        return "starts or ends with a hyphen"
    if "--" in name:
        return "has two hyphens in a row"
    return None


def _valid_name(name: str) -> bool:
    return bool(name) and _name_problem(unicodedata.normalize("NFKC", name)) is None


def _metadata(node: yaml.Node | None, where: str) -> dict[str, str]:
    import yaml

    if node is None or _is_null(node):
        return {}
    if not isinstance(node, yaml.MappingNode):
        raise ConfigurationError(
            f"{where}: metadata: in SKILL.md must be a map of fields (indented key: value "
            "lines below it)"
        )
    out: dict[str, str] = {}
    for key, value in node.value:
        text = _scalar(value)
        if text is None and not _is_null(value):
            # A list or map inside metadata: kept whole, as JSON text.
            nested = yaml.load(yaml.serialize(value), Loader=yaml.SafeLoader)
            text = json.dumps(nested, default=str, ensure_ascii=False)
        out[str(key.value)] = text or ""
    return out


def _is_null(node: yaml.Node) -> bool:
    return node.tag == "tag:yaml.org,2002:null"


def _allowed_tools(node: yaml.Node | None, where: str) -> tuple[str, ...]:
    import yaml

    if node is None or _is_null(node):
        return ()
    if isinstance(node, yaml.ScalarNode):
        return tuple(_TOOL_ENTRY.findall(str(node.value)))
    if isinstance(node, yaml.SequenceNode) and all(
        isinstance(item, yaml.ScalarNode) for item in node.value
    ):
        return tuple(str(item.value).strip() for item in node.value if str(item.value).strip())
    raise ConfigurationError(
        f"{where}: allowed-tools: in SKILL.md must be tool names separated by spaces "
        "(e.g. allowed-tools: Read Bash(git:*)) or a list of them"
    )


def _walk(folder: Path) -> Iterator[str]:
    seen = 0
    for top, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _SKIPPED_DIRS)
        for name in sorted(names):
            if name.startswith("."):
                continue
            full = Path(top, name)
            if full.is_symlink():
                target = _resolved(full)
                if (
                    target is None
                    or not target.is_relative_to(folder)
                    or _hidden(target.relative_to(folder).parts)
                ):
                    continue  # a loop, or a link out of the folder or to a hidden file
            seen += 1
            if seen > _MAX_WALKED:
                return
            yield full.relative_to(folder).as_posix()


def _hidden(parts: Sequence[str]) -> bool:
    """True when a relative path is hidden: a part starts with '.' or is a skipped folder."""
    return any(part.startswith(".") or part in _SKIPPED_DIRS for part in parts)


def _resolved(path: Path) -> Path | None:
    """``path`` resolved, or ``None`` for a symlink loop (RuntimeError on Python 3.11)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _listing(name: str, files: Sequence[str]) -> str:
    """The files of a skill, as the model sees them: how to read one, then one per line."""
    if not files:
        return "It has no other files."
    lines = [f"- {f}" for f in files[:MAX_LISTED]]
    if len(files) > MAX_LISTED:
        lines.append(f"- ... and {len(files) - MAX_LISTED} more")
    return f'Its files (read one with read_skill(name="{name}", path=...)):\n' + "\n".join(lines)


def _bounded(text: str, size: int | None = None) -> str:
    """``text`` up to `MAX_TEXT_CHARS` (cut at a line end), with a note when cut.

    ``size`` is the file's size in bytes when ``text`` is only the start of it.
    """
    if size is None and len(text) <= MAX_TEXT_CHARS:
        return text
    limit = min(len(text), MAX_TEXT_CHARS)
    cut = text.rfind("\n", 0, limit)
    cut = cut if cut > limit // 2 else limit
    whole = f"{len(text):,} characters" if size is None else f"{size:,} bytes"
    return (
        f"{text[:cut]}\n\n[Cut here: this is the first {cut:,} characters of {whole}; "
        "the rest is not shown.]"
    )


def _content(target: Path, shown: str, note: str) -> str | list[dict[str, Any]]:
    """A file of a skill as tool-result content: text, an image block, or a note."""
    size = target.stat().st_size
    with target.open("rb") as handle:
        head = handle.read(4 * MAX_TEXT_CHARS + 4)  # enough for MAX_TEXT_CHARS characters
        media = next((m for magic, m in _IMAGE_MAGIC if head.startswith(magic)), None)
        if media is None and head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            media = "image/webp"
        if media is not None and size <= _MAX_IMAGE_BYTES:
            data = base64.b64encode(head + handle.read()).decode()
            source = {"type": "base64", "media_type": media, "data": data}
            return [
                {"type": "text", "text": f"{note}{shown} ({media}, {size:,} bytes):"},
                {"type": "image", "source": source},
            ]
    complete = len(head) >= size
    text = None if media is not None else _decoded(head, final=complete)
    if text is None:
        kind = f"an image ({media}) over 5 MB" if media else "a binary file"
        return f"{note}{shown} is {kind} ({size:,} bytes); it cannot be shown as text."
    return note + _bounded(text, None if complete else size)


def _decoded(data: bytes, *, final: bool) -> str | None:
    """``data`` as UTF-8 text, or None when it looks binary (a NUL byte, invalid UTF-8)."""
    if b"\x00" in data[:8192]:
        return None
    try:
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=final)
    except UnicodeDecodeError:
        return None


def check_skills(items: Any, owner: str) -> list[Any]:
    """``skills=`` as a list: `Skill` folders with unique names, or API skill dicts."""
    if items is None:
        return []
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Sequence):
        raise ConfigurationError(
            f"{owner}: skills must be a list of groundswell.Skill or API skill dicts, "
            f"got {type(items).__name__}"
        )
    named: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, Mapping):
            check_api_item("container.skills", item, owner, f"skills[{i}]")
        elif not isinstance(item, Skill):
            raise ConfigurationError(
                f"{owner}: skills[{i}] must be a groundswell.Skill(path) or an API skill dict "
                f"{{'type': 'anthropic', 'skill_id': ..., 'version': ...}}, "
                f"got {type(item).__name__}"
            )
        elif item.name in named:
            first = items[named[item.name]]
            raise ConfigurationError(
                f"{owner}: skills[{named[item.name]}] ({first.path}) and skills[{i}] "
                f"({item.path}) are both named {item.name!r}; the model picks a skill by "
                "name, so names must be unique: pass one of them, or rename one (its folder "
                "and its name: field)"
            )
        else:
            named[item.name] = i
    return list(items)


def skills_tool(skills: Sequence[Skill]) -> Tool:
    """The ``read_skill`` tool: a skill's instructions, or a file of its folder."""
    by_name = {s.name: s for s in skills}

    def read_skill(name: str, path: str | None = None) -> str | list[dict[str, Any]]:
        """Read one of your skills: its instructions, or one of the files in its folder.

        Args:
            name: The skill's name, as listed in your instructions.
            path: A file in the skill's folder, relative to it (e.g. "reference/api.md"),
                as the instructions name it; leave it out to read the instructions.
        """
        skill = by_name.get(name)
        if skill is None:
            raise ToolFailed(f"read_skill: no skill named {name!r}; yours: {sorted(by_name)}")
        return skill.read(path)

    return Tool(read_skill)


def skills_system_text(skills: Sequence[Skill]) -> str:
    """The system-prompt section that tells the model which local skills it has."""
    lines = [f"- {s.name}: {s.description.replace(chr(10), chr(10) + '  ')}" for s in skills]
    return (
        "You have these skills. Call the read_skill tool with a skill's name to read "
        "its full instructions before using it, and with a path as well to read a file "
        "of its folder that they name:\n" + "\n".join(lines)
    )


def warn_missing_tools(skills: Sequence[Skill], tools: set[str]) -> None:
    """Warn once per message when a skill's ``allowed-tools`` names a tool the agent lacks.

    ``allowed-tools`` pre-approves tools, as in Claude Code: it never adds a
    tool. Every tool an agent has already runs without asking, so the only
    thing to tell is a tool the skill counts on and the agent does not have.
    """
    for skill in skills:
        missing = sorted({t.split("(", 1)[0] for t in skill.allowed_tools} - tools - {""})
        if missing:
            warnings.warn(
                f"skill {skill.name!r} pre-approves tools this agent does not have: "
                f"{', '.join(missing)}. A skill adds no tools: give the agent tools by "
                "these names if the skill needs them",
                UserWarning,
                stacklevel=2,
            )
