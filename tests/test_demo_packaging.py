"""Where `laya-edge demo` finds its bundles: the checkout's models/, or the installed data package
`laya_edge_models` that pyproject.toml maps models/ onto. The wheel itself is built, installed in a
fresh venv and run by scripts/check_wheel_demo.py (.ci/run); these are the fast checks."""
import json
import sys
import tomllib
from pathlib import Path

import pytest

from laya_edge import cli, demo

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"


def installed_layout(site: Path) -> Path:
    """A site-packages folder holding `laya_edge_models` as a wheel installs it (demo.json and
    the two bundles it names, as folders)."""
    package = site / demo.MODELS_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('"""data"""\n')
    (package / "demo.json").write_text((MODELS / "demo.json").read_text(encoding="utf-8"))
    for name in json.loads((MODELS / "demo.json").read_text(encoding="utf-8"))["routes"].values():
        (package / name).mkdir()
    return package


@pytest.fixture
def no_checkout(tmp_path, monkeypatch):
    """The package as a wheel installs it: no models/ next to it."""
    monkeypatch.delenv(demo.MODELS_ENV, raising=False)
    monkeypatch.setattr(demo, "checkout_models", lambda: tmp_path / "site" / "models")
    # a name of its own, so that an editable install's mapping of the real one plays no part
    monkeypatch.setattr(demo, "MODELS_PACKAGE", f"laya_edge_models_{tmp_path.name}")
    yield tmp_path / "site"
    sys.modules.pop(demo.MODELS_PACKAGE, None)


def test_a_checkout_reads_its_own_models(monkeypatch):
    monkeypatch.delenv(demo.MODELS_ENV, raising=False)
    assert demo.checkout_models() == MODELS
    assert demo.models_dir() == MODELS


def test_an_installed_wheel_reads_the_data_package(no_checkout, monkeypatch):
    package = installed_layout(no_checkout)
    monkeypatch.syspath_prepend(str(no_checkout))
    assert demo.installed_models() == package.resolve()
    assert demo.models_dir() == package.resolve()
    setup = demo.demo_setup(demo.models_dir())
    assert all(path.is_dir() and path.parent == package.resolve()
               for path in setup["routes"].values())
    assert demo.MODELS_PACKAGE not in sys.modules  # looked up, not imported


def test_the_checkout_wins_over_an_installed_copy(tmp_path, monkeypatch):
    monkeypatch.delenv(demo.MODELS_ENV, raising=False)
    installed_layout(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert demo.models_dir() == MODELS
    monkeypatch.setenv(demo.MODELS_ENV, str(tmp_path / "elsewhere"))
    assert demo.models_dir() == tmp_path / "elsewhere"


def test_neither_layout_is_an_error_naming_both(no_checkout, monkeypatch, capsys):
    assert demo.installed_models() is None
    assert demo.models_dir() == no_checkout / "models"
    assert cli.main(["demo"]) == 1
    err = capsys.readouterr().err
    assert "no demo models" in err and demo.MODELS_PACKAGE in err and demo.MODELS_ENV in err


def test_pyproject_ships_every_file_the_demo_reads_and_not_the_eval_set():
    """The package-data globs of `laya_edge_models`, applied to models/, cover demo.json and every
    file of the bundles it names, and leave out models/eval/ (scripts/eval_handwritten.py)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]
    setuptools = config["setuptools"]
    assert setuptools["package-dir"] == {demo.MODELS_PACKAGE: "models"}
    assert demo.MODELS_PACKAGE in setuptools["packages"]
    globbed = {path for pattern in setuptools["package-data"][demo.MODELS_PACKAGE]
               for path in MODELS.glob(pattern) if path.is_file()}
    setup = demo.demo_setup(MODELS)
    needed = {MODELS / "demo.json"} | {path for bundle in setup["routes"].values()
                                       for path in bundle.rglob("*") if path.is_file()}
    assert needed <= globbed, sorted(map(str, needed - globbed))
    assert not any("eval" in path.relative_to(MODELS).parts for path in globbed)
    # every package of laya_edge is listed: the list is written out because of the mapping
    packages = {".".join(path.parent.relative_to(ROOT).parts)
                for path in (ROOT / "laya_edge").rglob("__init__.py")}
    assert packages <= set(setuptools["packages"]), sorted(packages - set(setuptools["packages"]))
