#!/usr/bin/env python3
"""Run the README's quickstart exactly as written, in a fresh copy of the repository.

The block after `<!-- quickstart -->` in README.md holds two commands: the first installs the
runtime into a new virtual environment and runs the demo, the second is `.ci/run`, the test
command CI itself runs. This script copies the files git tracks into a temporary directory (no
`.venv`, nothing installed), runs the first command there with bash, and checks that it succeeded
and that the demo printed its report; it checks that the second command is `.ci/run`, which is
what invokes this script, so running it again here would recurse.

    python scripts/check_quickstart.py
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[1]
MARKER = "<!-- quickstart -->"


def quickstart_commands(readme: str) -> List[str]:
    """The command lines of the bash block that follows the quickstart marker."""
    found = re.search(re.escape(MARKER) + r"\s*```bash\n(.*?)```", readme, re.S)
    if not found:
        raise SystemExit(f"README.md has no ```bash block after {MARKER}")
    return [line.strip() for line in found.group(1).splitlines() if line.strip()]


def fresh_copy(target: Path) -> Path:
    """The tracked files of the checkout (as a clean clone would have them) under `target`."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            destination = target / name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, destination)
    return target


def main() -> int:
    commands = quickstart_commands((ROOT / "README.md").read_text(encoding="utf-8"))
    if len(commands) != 2 or commands[1] != ".ci/run":
        raise SystemExit(f"the quickstart must be two commands, the second `.ci/run`: {commands}")
    with tempfile.TemporaryDirectory() as scratch:
        checkout = fresh_copy(Path(scratch) / "laya_edge")
        print(f"$ {commands[0]}   (in a fresh copy: {checkout})", flush=True)
        completed = subprocess.run(["bash", "-c", commands[0]], cwd=checkout, text=True,
                                   capture_output=True, timeout=900)
    print(completed.stdout[-3000:])
    if completed.returncode != 0:
        print(completed.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"the quickstart's first command failed with {completed.returncode}")
    if "laya_edge demo" not in completed.stdout or "tickets in" not in completed.stdout:
        raise SystemExit("the quickstart's demo did not print its report")
    print("quickstart: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
