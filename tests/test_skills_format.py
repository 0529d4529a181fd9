"""Local skills in the Agent Skills format, end to end through the real SDK and the fake API.

The skills here are written as the public format describes them: YAML front
matter (block and folded descriptions, escaped quotes, nested metadata,
allowed-tools), instructions that name reference files, and scripts.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from groundswell import Agent, ConfigurationError, Prompt, PromptOverrides, Skill
from groundswell.skills.local import MAX_TEXT_CHARS
from groundswell.testing import FakeAnthropicAPI, text, tool_calls, tool_use

CLAUDE_DOCS = """\
---
name: claude-docs
description: |-
  Reference for the Claude API: model ids, "params", streaming.
  TRIGGER when code imports `anthropic`; SKIP when another provider is named.
license: Complete terms in LICENSE.txt
---
# Claude docs

Look things up in reference/models.md before answering.
"""

PDF_FORMS = """\
---
name: pdf-forms
description: >
  Fill in PDF forms
  and check the result.
license: Apache-2.0
compatibility: Needs Python 3.11 and the pypdf package
metadata:
  author: example-org
  version: "1.0"
  revision: 1.10
allowed-tools: run_python read_skill
---
# Filling PDF forms

If the form has fillable fields, read FORMS.md and follow it.
Then run scripts/fill.py with the form's path.
"""

SHEETS = """\
---
name: sheets
description: "Use for spreadsheets (\\"xlsx\\", \\"csv\\"): open, edit \\u2014 or create them."
---
Keep formulas; never paste values over them.
"""


def write_skill(root: Path, name: str, skill_md: str, files: dict[str, str] | None = None) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(skill_md, encoding="utf-8")
    for relative, content in (files or {}).items():
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(content, encoding="utf-8")
    return folder


@pytest.fixture
def skills_dir(tmp_path: Path) -> Path:
    root = tmp_path / "skills"
    write_skill(root, "claude-docs", CLAUDE_DOCS, {"reference/models.md": "Opus, Sonnet, Haiku."})
    write_skill(
        root,
        "pdf-forms",
        PDF_FORMS,
        {
            "forms.md": "# Forms\nList the fields first, then fill them.\n",
            "reference/api.md": "fill(form, values) -> bytes\n",
            "scripts/fill.py": (
                "import pathlib, sys\n"
                "pathlib.Path(sys.argv[1]).write_text('filled')\n"
                "print('filled', sys.argv[1])\n"
            ),
        },
    )
    write_skill(root, "sheets", SHEETS)
    return root


def agent_for(fake: FakeAnthropicAPI, **kw: Any) -> Agent:
    kw.setdefault("name", "skilled")
    return Agent(client=fake.client(max_retries=0), **kw)


def results(fake: FakeAnthropicAPI) -> list[dict[str, Any]]:
    return fake.requests[-1].latest_tool_results()


def run_python(script: str, argument: str) -> str:
    """Run a Python script with one argument and return what it printed.

    Args:
        script: The script's path.
        argument: Its one argument.
    """
    done = subprocess.run(
        [sys.executable, script, argument], capture_output=True, text=True, check=True
    )
    return done.stdout


async def test_the_model_sees_each_skills_yaml_name_and_description(skills_dir: Path) -> None:
    skills = [Skill(skills_dir / n) for n in ("claude-docs", "pdf-forms", "sheets")]
    fake = FakeAnthropicAPI([text("ok")])
    await agent_for(fake, skills=skills, tools=[run_python]).prompt("hello")
    system = fake.requests[0].system
    assert system.startswith("You have these skills.")
    assert (
        '- claude-docs: Reference for the Claude API: model ids, "params", streaming.\n'
        "  TRIGGER when code imports `anthropic`; SKIP when another provider is named.\n"
    ) in system
    assert "- pdf-forms: Fill in PDF forms and check the result.\n" in system
    assert (
        '- sheets: Use for spreadsheets ("xlsx", "csv"): open, edit \u2014 or create them.'
        in system
    )
    assert "|-" not in system and ">" not in system and "\\" not in system
    assert "read_skill" in {t["name"] for t in fake.requests[0].tools}


def test_every_field_of_the_format_is_kept_on_the_skill(skills_dir: Path) -> None:
    pdf = Skill(skills_dir / "pdf-forms" / "SKILL.md")  # the file itself works too
    assert (pdf.name, pdf.license) == ("pdf-forms", "Apache-2.0")
    assert pdf.compatibility == "Needs Python 3.11 and the pypdf package"
    # Strings as written, not YAML numbers: 1.10 stays "1.10".
    assert pdf.metadata == {"author": "example-org", "version": "1.0", "revision": "1.10"}
    assert pdf.allowed_tools == ("run_python", "read_skill")
    assert pdf.folder == (skills_dir / "pdf-forms").resolve()
    assert pdf.body.startswith("# Filling PDF forms") and "---" not in pdf.body
    assert pdf.files() == ["SKILL.md", "forms.md", "reference/api.md", "scripts/fill.py"]
    docs = Skill(skills_dir / "claude-docs")
    assert (docs.license, docs.compatibility, docs.metadata, docs.allowed_tools) == (
        "Complete terms in LICENSE.txt",
        None,
        {},
        (),
    )


async def test_the_model_reads_the_instructions_then_the_files_they_name(
    skills_dir: Path,
) -> None:
    fake = FakeAnthropicAPI(
        [
            tool_use("read_skill", {"name": "pdf-forms"}),
            # The instructions say FORMS.md; the file is forms.md, as in many published skills.
            tool_calls(
                ("read_skill", {"name": "pdf-forms", "path": "FORMS.md"}),
                ("read_skill", {"name": "pdf-forms", "path": "reference/api.md"}),
                ("read_skill", {"name": "claude-docs", "path": "reference"}),
            ),
            text("Filled."),
        ]
    )
    skills = [Skill(skills_dir / "pdf-forms"), Skill(skills_dir / "claude-docs")]
    agent = agent_for(fake, skills=skills, tools=[run_python])
    assert await agent.prompt("Fill in form.pdf") == "Filled."
    instructions = fake.requests[1].tool_results()[0]["content"]
    assert instructions.startswith("# Filling PDF forms\n\nIf the form has fillable fields")
    assert f"This skill's folder is {(skills_dir / 'pdf-forms').resolve()}." in instructions
    assert "- forms.md\n- reference/api.md\n- scripts/fill.py\n" in instructions
    assert "- SKILL.md" not in instructions
    forms, api, folder = (r["content"] for r in results(fake))
    assert (
        forms
        == "(no file 'FORMS.md'; this is 'forms.md')\n# Forms\nList the fields first, then fill them.\n"
    )
    assert api == "fill(form, values) -> bytes\n"
    assert folder.startswith("reference/ is a folder of skill 'claude-docs'.")
    assert folder.endswith("\n- reference/models.md")
    assert not any(r.get("is_error") for r in results(fake))


async def test_paths_that_leave_the_skill_folder_are_refused(
    skills_dir: Path, tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top-secret-value")
    folder = skills_dir / "pdf-forms"
    (folder / "notes.md").symlink_to(secret)
    (folder / "outside").symlink_to(tmp_path)
    (folder / ".env").write_text("TOKEN=top-secret-value")
    (folder / "forms-link.md").symlink_to(folder / "forms.md")  # stays inside: fine
    attempts = [
        "../claude-docs/SKILL.md",
        "reference/../../sheets/SKILL.md",
        str(secret),
        "C:\\Windows\\win.ini",
        "notes.md",
        "outside/secret.txt",
        ".env",
        "missing.md",
    ]
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                *[("read_skill", {"name": "pdf-forms", "path": p}) for p in attempts],
                ("read_skill", {"name": "pdf-forms", "path": "forms-link.md"}),
                ("read_skill", {"name": "nothing", "path": "forms.md"}),
            ),
            text("ok"),
        ]
    )
    await agent_for(fake, skills=[Skill(folder)], tools=[run_python]).prompt("go")
    *refused, linked, unknown = results(fake)
    messages = [r["content"] for r in refused]
    assert all(r.get("is_error") for r in refused), messages
    assert "climbs out with '..'" in messages[0] and "climbs out with '..'" in messages[1]
    assert "it is absolute" in messages[2] and "it is absolute" in messages[3]
    assert "a symlink leads out of it" in messages[4] and "a symlink leads out of it" in messages[5]
    assert "hidden" in messages[6]
    assert messages[7].startswith("read_skill: skill 'pdf-forms' has no file 'missing.md'.")
    assert "- forms.md" in messages[7] and "notes.md" not in messages[7]
    assert not linked.get("is_error") and linked["content"].startswith("# Forms")
    assert unknown["is_error"] and "no skill named 'nothing'" in unknown["content"]
    assert "top-secret-value" not in str(fake.requests[-1].body)


async def test_images_binaries_and_large_files_come_back_bounded(tmp_path: Path) -> None:
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    folder = write_skill(
        tmp_path,
        "assets-demo",
        "---\nname: assets-demo\ndescription: Shows assets.\n---\nSee assets/.\n",
        {"assets/big.md": "a line of reference text\n" * 10_000},
    )
    (folder / "assets" / "logo.png").write_bytes(png)
    (folder / "assets" / "data.bin").write_bytes(bytes(range(256)) * 4)
    fake = FakeAnthropicAPI(
        [
            tool_calls(
                *[
                    ("read_skill", {"name": "assets-demo", "path": f"assets/{f}"})
                    for f in ("logo.png", "data.bin", "big.md")
                ]
            ),
            text("seen"),
        ]
    )
    await agent_for(fake, skills=[Skill(folder)]).prompt("look")
    image, binary, big = (r["content"] for r in results(fake))
    assert image[0] == {"type": "text", "text": "assets/logo.png (image/png, 70 bytes):"}
    assert image[1]["type"] == "image" and image[1]["source"]["media_type"] == "image/png"
    assert base64.b64decode(image[1]["source"]["data"]) == png
    assert binary == "assets/data.bin is a binary file (1,024 bytes); it cannot be shown as text."
    assert len(big) < MAX_TEXT_CHARS + 200
    assert big.startswith("a line of reference text\n")
    assert big.endswith("characters of 250,000 characters; the rest is not shown.]")


async def test_scripts_run_only_through_a_tool_the_agent_was_given(
    skills_dir: Path, tmp_path: Path
) -> None:
    script = (skills_dir / "pdf-forms" / "scripts" / "fill.py").resolve()
    form = tmp_path / "form.pdf"
    fake = FakeAnthropicAPI(
        [
            tool_use("read_skill", {"name": "pdf-forms", "path": "scripts/fill.py"}),
            text("I can read the script but have no tool to run it."),
        ]
    )
    # The skill pre-approves run_python; an agent without it is told so.
    with pytest.warns(UserWarning, match="'pdf-forms' pre-approves .*: run_python"):
        await agent_for(fake, skills=[Skill(skills_dir / "pdf-forms")]).prompt("fill form.pdf")
    assert results(fake)[0]["content"].startswith("import pathlib, sys\n")
    assert not form.exists()  # reading a script never runs it
    fake = FakeAnthropicAPI(
        [
            tool_use("run_python", {"script": str(script), "argument": str(form)}),
            text("Filled."),
        ]
    )
    agent = agent_for(fake, skills=[Skill(skills_dir / "pdf-forms")], tools=[run_python])
    await agent.prompt("fill form.pdf")
    assert results(fake)[0]["content"] == f"filled {form}\n"
    assert form.read_text() == "filled"


def bash_tool(command: str) -> str:
    """Run a shell command."""
    return command


def read_tool(path: str) -> str:
    """Read a file."""
    return path


bash_tool.__name__ = "Bash"
read_tool.__name__ = "Read"


async def test_allowed_tools_the_agent_lacks_are_named_in_a_warning(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "release",
        "---\nname: release\ndescription: Cut a release.\n"
        "allowed-tools: Bash(git tag:*), Read, changelog\n---\nTag it.\n",
    )

    def changelog() -> str:
        """The changelog."""
        return "v1"

    fake = FakeAnthropicAPI([text("ok"), text("ok")])
    agent = agent_for(fake, skills=[Skill(folder)], tools=[changelog])
    with pytest.warns(UserWarning, match="pre-approves tools this agent does not have") as seen:
        await agent.prompt("release")
    (warning,) = seen
    assert "Bash, Read." in str(warning.message) and "changelog" not in str(warning.message)
    # Every tool present: nothing to say (the suite turns any warning into an error).
    bash = agent_for(fake, skills=[Skill(folder)], tools=[changelog, bash_tool, read_tool])
    await bash.prompt("release")


BAD_SKILLS = [
    ("Bad-Name", "---\nname: Bad-Name\ndescription: d\n---\n", "has capital letters"),
    ("a--b", "---\nname: a--b\ndescription: d\n---\n", "two hyphens in a row"),
    ("-lead", "---\nname: -lead\ndescription: d\n---\n", "starts or ends with a hyphen"),
    ("under_score", "---\nname: under_score\ndescription: d\n---\n", "holds '_'"),
    ("x" * 65, f"---\nname: {'x' * 65}\ndescription: d\n---\n", "has 65 characters"),
    ("notes", "---\nname: memo\ndescription: d\n---\n", "does not match its folder 'notes'"),
    ("notes", "---\ndescription: d\n---\n", "name is missing from SKILL.md; add name: notes"),
    ("notes", "---\nname: notes\n---\n", "description is missing or empty"),
    ("notes", "---\nname: notes\ndescription: [a, b]\n---\n", "description: in SKILL.md must be text"),
    ("notes", "---\nname: notes\ndescription: d\nmetadata: v1\n---\n", "metadata: in SKILL.md must be a map"),
    ("notes", "---\nname: notes\ndescription: d\nallowed-tools: {a: 1}\n---\n", "allowed-tools: in SKILL.md"),
    ("notes", "---\nname: notes\ndescription: a: b: c\n---\n", "not valid YAML"),
    ("notes", "---\nname: notes\nname: notes\ndescription: d\n---\n", "sets name: twice"),
    ("notes", "# Notes without front matter\n", "must start with YAML front matter"),
]  # fmt: skip


@pytest.mark.parametrize(("folder", "skill_md", "message"), BAD_SKILLS)
def test_a_skill_that_breaks_the_format_is_a_configuration_error(
    tmp_path: Path, folder: str, skill_md: str, message: str
) -> None:
    path = write_skill(tmp_path, folder, skill_md)
    with pytest.raises(ConfigurationError, match="Skill\\(") as caught:
        Agent(name="a", skills=[Skill(path)])
    assert message in str(caught.value)


def test_no_skill_md_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no SKILL\.md there"):
        Skill(tmp_path)


def test_two_skills_with_one_name_are_refused_when_the_agent_is_built(tmp_path: Path) -> None:
    body = "---\nname: notes\ndescription: Take notes.\n---\nWrite them down.\n"
    first = Skill(write_skill(tmp_path / "team", "notes", body))
    second = Skill(write_skill(tmp_path / "mine", "notes", body))
    for build in (
        lambda: Agent(name="scribe", skills=[first, second]),
        lambda: Prompt(user="hi", skills=[first, second]),
        lambda: PromptOverrides(skills=[first, second]),
    ):
        with pytest.raises(ConfigurationError, match="are both named 'notes'") as caught:
            build()
        assert str(first.path) in str(caught.value) and str(second.path) in str(caught.value)
        assert "rename one" in str(caught.value)


def test_other_front_matter_fields_and_nested_metadata_are_kept(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "deploy",
        textwrap.dedent(
            """\
            ---
            name: deploy
            description: 'Deploy the app: it''s the "ship" step.'
            disable-model-invocation: true
            metadata:
              owner: ops
              tags: [prod, eu]
            allowed-tools:
              - Bash(kubectl:*)
              - Read
            ---
            Deploy.
            """
        ),
    )
    skill = Skill(folder)
    assert skill.description == 'Deploy the app: it\'s the "ship" step.'
    assert skill.metadata == {"owner": "ops", "tags": '["prod", "eu"]'}
    assert skill.allowed_tools == ("Bash(kubectl:*)", "Read")
    assert skill.front_matter["disable-model-invocation"] is True
    assert skill.front_matter["metadata"]["tags"] == ["prod", "eu"]


async def test_symlinks_to_hidden_files_loops_and_fifos_are_refused(tmp_path: Path) -> None:
    folder = write_skill(
        tmp_path,
        "notes",
        "---\nname: notes\ndescription: Take notes.\n---\nRead guide.md.\n",
        {"guide.md": "# Guide\n", "node_modules/pkg/index.js": "module.exports = 1\n"},
    )
    (folder / ".env").write_text("TOKEN=top-secret-value")
    (folder / "notes.md").symlink_to(folder / ".env")  # typed name looks harmless
    (folder / "deps.js").symlink_to(folder / "node_modules" / "pkg" / "index.js")
    (folder / "loop.md").symlink_to(folder / "loop.md")
    os.mkfifo(folder / "pipe.md")  # open() on it would wait for a writer forever
    skill = Skill(folder)
    assert skill.files() == ["SKILL.md", "guide.md", "pipe.md"]
    attempts = ["notes.md", "deps.js", "loop.md", "pipe.md", "guide.md"]
    fake = FakeAnthropicAPI(
        [
            tool_calls(*[("read_skill", {"name": "notes", "path": p}) for p in attempts]),
            text("ok"),
        ]
    )
    await agent_for(fake, skills=[skill]).prompt("go")
    hidden, module, loop, pipe, guide = results(fake)
    assert hidden["is_error"] and "'notes.md' is hidden" in hidden["content"]
    assert module["is_error"] and "'deps.js' is hidden" in module["content"]
    assert loop["is_error"] and "symlink that loops" in loop["content"]
    assert str(tmp_path) not in loop["content"]
    assert pipe["is_error"] and "not a regular file" in pipe["content"]
    assert guide["content"] == "# Guide\n"
    assert "top-secret-value" not in str(fake.requests[-1].body)


def test_yaml_aliases_in_the_front_matter_are_refused(tmp_path: Path) -> None:
    bomb = "".join(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n" for i in range(1, 9))
    folder = write_skill(
        tmp_path,
        "bomb",
        f"---\nname: bomb\ndescription: d\nl0: &l0 [lol]\n{bomb}---\nBody.\n",
    )
    with pytest.raises(ConfigurationError, match="uses a YAML anchor or alias") as caught:
        Skill(folder)
    assert "Skill(" in str(caught.value) and "write each value out in full" in str(caught.value)
