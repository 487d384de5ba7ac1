#!/usr/bin/env python3
"""The demo from an installed wheel: build it, install it in a fresh venv, run `laya-edge demo`
from a folder outside the checkout.

Steps, each failing loudly (exit status 1 and a line saying what went wrong):

1. copy the files git would commit (tracked, and untracked ones it does not ignore) into a
   temporary folder, so nothing stale from `build/` and nothing ignored reaches the wheel;
2. build the wheel there (`pip wheel --no-deps`; without build isolation where this interpreter
   already has the setuptools pyproject.toml asks for);
3. check the wheel: the data package `laya_edge_models` holds `demo.json` and every file of the
   bundles it names (as in `models/`, byte for byte), nothing else from `models/` but the model
   card and report, and the wheel does not depend on torch;
4. install it into a new virtual environment (its dependencies from the package index), and check
   that pip installed no torch, transformers or upstream laya;
5. run that venv's `laya-edge demo` from an empty temporary folder, with no
   `LAYA_EDGE_DEMO_MODELS` and no `PYTHONPATH`, and check that it read the models from the venv's
   `laya_edge_models`, answered every ticket, and printed the README's demo excerpt.

    python scripts/check_wheel_demo.py [--keep DIR]

`.ci/run` runs it after the tests.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "laya_edge_models"
# what the runtime must never bring along (README: "no torch at runtime")
FORBIDDEN = ("torch", "transformers", "laya")
# model card and training report ride along with the bundles (small, and they say what the
# English model is); anything else under models/ stays in the checkout
EXTRAS = ("README.md", "demo-report.json", "__init__.py")
SETUPTOOLS_NEEDED = (77, 0)


class Failed(Exception):
    """One check failed; the message says which and why."""


def say(message: str) -> None:
    print(f"check_wheel_demo: {message}", flush=True)


def run(command: Sequence[str], timeout: int, **kwargs) -> subprocess.CompletedProcess:
    completed = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                               **kwargs)
    if completed.returncode != 0:
        raise Failed(f"`{' '.join(map(str, command))}` exited {completed.returncode}:\n"
                     f"{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return completed


def committed_files() -> List[str]:
    """What a commit of the working tree would hold: tracked files and untracked ones git does
    not ignore (deleted files left out)."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], 60,
                 cwd=ROOT).stdout.split("\0")
    return sorted({name for name in listed if name and (ROOT / name).is_file()})


def fresh_copy(target: Path) -> Path:
    for name in committed_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, destination)
    return target


def has_setuptools() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    found = tuple(int(part) for part in re.findall(r"\d+", setuptools.__version__)[:2])
    return found >= SETUPTOOLS_NEEDED


def build_wheel(source: Path, out: Path) -> Path:
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir",
               str(out), str(source)]
    if has_setuptools():
        command.insert(5, "--no-build-isolation")
    run(command, 900)
    wheels = sorted(out.glob("laya_edge-*.whl"))
    if len(wheels) != 1:
        raise Failed(f"expected one laya_edge wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def expected_model_files() -> Dict[str, str]:
    """`{path in the wheel: sha256}` for every file the demo reads, from the checkout's models/."""
    models = ROOT / "models"
    setup = json.loads((models / "demo.json").read_text(encoding="utf-8"))
    files = {f"{PACKAGE}/demo.json": sha256((models / "demo.json").read_bytes())}
    for route, name in setup["routes"].items():
        bundle = models / name
        if not bundle.is_dir():
            raise Failed(f"models/demo.json: the {route} bundle models/{name} is missing")
        for path in sorted(bundle.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[f"{PACKAGE}/{path.relative_to(models).as_posix()}"] = sha256(
                    path.read_bytes())
    return files


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        expected = expected_model_files()
        missing = sorted(set(expected) - names)
        if missing:
            raise Failed(f"{wheel.name} lacks files the demo reads: {missing}")
        changed = sorted(name for name, digest in expected.items()
                         if sha256(archive.read(name)) != digest)
        if changed:
            raise Failed(f"{wheel.name}: these differ from models/: {changed}")
        shipped = {name for name in names if name.startswith(f"{PACKAGE}/")}
        allowed = set(expected) | {f"{PACKAGE}/{extra}" for extra in EXTRAS}
        stray = sorted(shipped - allowed)
        if stray:
            raise Failed(f"{wheel.name} carries files from models/ the demo does not read: {stray}")
        (metadata,) = [name for name in names if name.endswith(".dist-info/METADATA")]
        requires = [line.split(":", 1)[1].strip()
                    for line in archive.read(metadata).decode().splitlines()
                    if line.startswith("Requires-Dist:") and "extra ==" not in line]
    base = {re.split(r"[\s<>=!~\[;]", requirement, 1)[0].lower() for requirement in requires}
    pulled = sorted(base & set(FORBIDDEN))
    if pulled:
        raise Failed(f"{wheel.name} depends on {pulled} outside any extra")
    say(f"wheel {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB, {len(shipped)} files in "
        f"{PACKAGE}, base dependencies {sorted(base)}")


def install(wheel: Path, venv: Path) -> Path:
    run([sys.executable, "-m", "venv", str(venv)], 300)
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], 1800, env=clean_env())
    listed = json.loads(run([str(python), "-m", "pip", "list", "--format=json"], 120,
                            env=clean_env()).stdout)
    installed = {entry["name"].lower().replace("_", "-") for entry in listed}
    pulled = sorted(installed & set(FORBIDDEN))
    if pulled:
        raise Failed(f"installing the wheel installed {pulled}")
    say(f"installed into {venv}: {len(installed)} distributions, none of {list(FORBIDDEN)}")
    return venv


def clean_env() -> Dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("LAYA_EDGE_DEMO_MODELS", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def readme_excerpt() -> List[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- demo-output -->\s*```text\n(.*?)```", readme, re.S)
    if not found:
        raise Failed("README.md has no ```text block after <!-- demo-output -->")
    return found.group(1).splitlines()


def run_demo(venv: Path, elsewhere: Path) -> str:
    elsewhere.mkdir(parents=True, exist_ok=True)
    completed = run([str(venv / "bin" / "laya-edge"), "demo"], 600, cwd=elsewhere,
                    env=clean_env())
    out = completed.stdout
    found = re.search(r"^laya_edge demo: models in (.+)$", out, re.M)
    if not found:
        raise Failed(f"the demo did not say where its models are:\n{out[-2000:]}")
    where = Path(found.group(1)).resolve()
    if where.name != PACKAGE or venv.resolve() not in where.parents:
        raise Failed(f"the demo read models from {where}, not from the venv's {PACKAGE}")
    if "tickets in" not in out or "answered by the cache hook" not in out:
        raise Failed(f"the demo did not print its report:\n{out[-2000:]}")
    printed, shown = out.splitlines(), readme_excerpt()
    if shown[0] not in printed:
        raise Failed(f"the README's demo excerpt is not in the wheel's demo output:\n{out}")
    start = printed.index(shown[0])
    if printed[start:start + len(shown)] != shown:
        raise Failed("the wheel's demo prints other answers than the README's excerpt:\n"
                     + "\n".join(printed[start:start + len(shown)]))
    say(f"`laya-edge demo` from {elsewhere}: models in {where}, README excerpt matches")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="work here and leave it (default: a temporary "
                        "folder, removed afterwards)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="laya-edge-wheel-"))
    try:
        source = fresh_copy(scratch / "source")
        wheel = build_wheel(source, scratch / "dist")
        say(f"built in {time.perf_counter() - started:.0f}s")
        check_wheel(wheel)
        venv = install(wheel, scratch / "venv")
        run_demo(venv, scratch / "elsewhere")
    except (Failed, subprocess.TimeoutExpired) as failure:
        print(f"check_wheel_demo: FAILED: {failure}", file=sys.stderr)
        return 1
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)
    say(f"ok in {time.perf_counter() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
