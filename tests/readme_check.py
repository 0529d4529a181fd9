"""Follow the README in an environment where Groundswell was installed from its wheel.

Run by ``nox -s wheel`` and by ``tests/test_wheel_install.py``, from a folder
outside the checkout::

    python readme_check.py path/to/README.md

It checks that ``groundswell`` is the installed copy (not the checkout), then
runs every ``groundswell ...`` command of the README's ``bash`` blocks and every
``python`` block, offline, and fails on the first one that does not succeed.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path


def fail(message: str) -> None:
    print(f"readme_check: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def main(readme: Path) -> None:
    import groundswell

    checkout = readme.resolve().parent
    installed = Path(groundswell.__file__).resolve()
    site_packages = Path(sysconfig.get_path("purelib")).resolve()
    if installed.parent == checkout / "groundswell" or site_packages not in installed.parents:
        fail(f"groundswell was imported from {installed}, not from the wheel in {site_packages}")
    print(f"groundswell {groundswell.__version__} from {installed.parent}")

    text = readme.read_text(encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    commands = [
        line.split(" #")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for line in block.splitlines()
        if line.startswith("groundswell ")
    ]
    if not any(c.startswith("groundswell examples run") for c in commands):
        fail("the README shows no `groundswell examples run` command")
    bin_dir = Path(sys.executable).parent
    for command in commands:
        argv = shlex.split(command)
        print(f"$ {command}", flush=True)
        out = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], capture_output=True, text=True, env=env
        )
        print(out.stdout[-2000:])
        if out.returncode != 0:
            fail(f"`{command}` exited {out.returncode}: {out.stderr[-2000:]}")
        if argv[1:3] == ["examples", "run"]:
            ran = len(re.findall(r"^== \d\d_", out.stdout, flags=re.M))
            trees = len(re.findall(r"^✓ workflow ", out.stdout, flags=re.M))
            if ran < 10 or trees < ran:
                fail(f"`{command}` ran {ran} examples and printed {trees} trees")

    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    for index, code in enumerate(blocks):
        print(f"$ python <README python block {index + 1}>", flush=True)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        print(out.stdout[-2000:])
        if out.returncode != 0 or not out.stdout.strip():
            fail(f"README python block {index + 1} failed: {out.stderr[-2000:]}")
    print(f"readme_check: ok ({len(commands)} commands, {len(blocks)} python blocks)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python readme_check.py README.md")
    main(Path(sys.argv[1]))
