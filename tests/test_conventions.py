"""Package conventions: the wheel carries `py.typed` and every module, and the exporter reports
progress through its logger without redirecting stderr or touching the root logger."""
from __future__ import annotations

import logging
import subprocess
import sys
import zipfile
from pathlib import Path

from laya_edge.export import ExportOptions, Progress, export_bundle
from laya_edge.export.logs import progress_on_stderr, third_party_quiet

REPO = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_py_typed_and_every_module(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           "--no-build-isolation", "--wheel-dir", str(tmp_path), str(REPO)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("laya_edge-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "laya_edge/py.typed" in names
    modules = {str(path.relative_to(REPO)) for path in (REPO / "laya_edge").rglob("*.py")}
    assert modules <= names, sorted(modules - names)


class Records(logging.Handler):
    """Every record it sees, with the process's logging state at that moment."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record: logging.LogRecord) -> None:
        root = logging.getLogger()
        self.seen.append((record.name, record.levelno, record.getMessage(), sys.stderr,
                          root.level, list(root.handlers)))


def test_export_progress_goes_through_the_export_logger(checkpoints, tmp_path):
    logger = logging.getLogger("laya_edge.export")
    records, level = Records(), logger.level
    root = logging.getLogger()
    root_state = (root.level, list(root.handlers), list(root.filters))
    stderr = sys.stderr
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        export_bundle(ExportOptions(source=str(checkpoints["modernbert-tiny"]),
                                    out=tmp_path / "bundle", exporter="torchscript"), Progress())
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    messages = [message for name, _, message, *_ in records.seen if name == "laya_edge.export"]
    for stage in ("download", "build", "export", "optimise", "verify", "write"):
        assert any(message.startswith(f"{stage}: done in ") for message in messages), stage
    assert {(seen_stderr, seen_level, tuple(seen_handlers))
            for *_, seen_stderr, seen_level, seen_handlers in records.seen} == {
        (stderr, root_state[0], tuple(root_state[1]))}
    assert (root.level, list(root.handlers), list(root.filters)) == root_state


def test_a_quiet_build_holds_back_third_party_notes_not_errors_nor_the_users_own(monkeypatch):
    root = logging.getLogger()
    records = Records()
    monkeypatch.setattr(root, "handlers", [records])
    level = root.level
    root.setLevel(logging.DEBUG)
    try:
        seen_levels = quiet_window(root, records)
    finally:
        root.setLevel(level)
    assert [message for _, _, message, *_ in records.seen] == ["failed", "the user's own line"]
    assert seen_levels == {logging.DEBUG}
    assert root.handlers == [records] and root.filters == []
    assert logging.getLogger("onnxscript").level == logging.NOTSET


def quiet_window(root: logging.Logger, records: Records) -> set:
    note = logging.LogRecord("root", logging.WARNING, "/x/site-packages/onnxruntime/quantization/"
                             "onnx_quantizer.py", 1, "consider pre-processing", None, None)
    failure = logging.LogRecord("root", logging.ERROR, note.pathname, 1, "failed", None, None)
    with third_party_quiet():
        logging.getLogger("onnxscript.optimizer").info("folding notes")
        logging.getLogger("torch.onnx._internal.exporter").warning("torchvision is not installed")
        root.handle(note)
        root.handle(failure)
        logging.getLogger("my.application").info("the user's own line")
    return {seen_level for *_, seen_level, _ in records.seen}


def test_a_root_logger_without_handlers_is_not_configured_behind_the_users_back(monkeypatch):
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    with third_party_quiet():
        logging.warning("a library calling the module-level function")  # would run basicConfig
    assert root.handlers == []


def test_command_line_progress_goes_to_stderr_once_per_run(capsys):
    for _ in range(2):
        with progress_on_stderr("laya_edge.export", "laya_edge.export"):
            Progress().log("build: done in 1.00s")
    Progress().log("after the command")
    assert capsys.readouterr().err.splitlines() == ["[laya_edge.export] build: done in 1.00s"] * 2
