"""Shared fixtures: a clean process-wide hook registry around every test, and the small
generated checkpoints and their exported bundles (session-scoped, shared by every module)."""
import os
import shutil
import time
from pathlib import Path

import pytest

from laya_edge import hooks as edge_hooks

# Under pytest-xdist two workers share the two cores (README, "Develop and test"). torch starts one OpenMP
# thread per core in each of them, and each worker's threads then take turns with the other's:
# one thread each (in the processes they start too), set before anything imports torch.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def _onnxruntime_threads_sleep_while_idle(worker_id):
    """onnxruntime's pool threads spin while they wait for work, which on cores shared by two
    workers burns the time the other worker computes in (two processes running MiniLM batches
    side by side here: 20.7 s with spinning, 15 s without). Under xdist every session in the
    workers is made with spinning off; a single-process run keeps onnxruntime's default."""
    if worker_id == "master":
        yield
        return
    import onnxruntime

    real = onnxruntime.InferenceSession.__init__

    def without_spinning(self, path_or_bytes, sess_options=None, *args, **kwargs):
        options = sess_options if sess_options is not None else onnxruntime.SessionOptions()
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        real(self, path_or_bytes, options, *args, **kwargs)

    onnxruntime.InferenceSession.__init__ = without_spinning
    yield
    onnxruntime.InferenceSession.__init__ = real


@pytest.fixture(scope="session", autouse=True)
def _digest_records_in_a_temporary_directory(tmp_path_factory):
    """Loads record the digests of the bundles they check (laya_edge.digest_cache): keep the
    records of the test session's bundles out of the user's cache, for child processes too."""
    os.environ["LAYA_EDGE_DIGEST_CACHE"] = str(tmp_path_factory.mktemp("digests"))


@pytest.fixture(scope="session", autouse=True)
def _no_session_cache_unless_asked():
    """A user's LAYA_EDGE_SESSION_CACHE must not make the suite write entries into their cache;
    tests of the cache pass `session_cache=` themselves."""
    os.environ["LAYA_EDGE_SESSION_CACHE"] = "off"


@pytest.fixture(autouse=True)
def _clean_default_hooks():
    edge_hooks.clear_default_hooks()
    yield
    edge_hooks.clear_default_hooks()


@pytest.fixture(params=["laya_edge", "upstream"])
def impl(request):
    """The hook module under test: ours, or upstream laya 0.4.15's, for side-by-side checks.

    Tests taking this fixture assert the same observable behaviour of both implementations.
    """
    if request.param == "laya_edge":
        yield edge_hooks
        return
    import laya.hooks as upstream_hooks
    upstream_hooks.clear_default_hooks()
    yield upstream_hooks
    upstream_hooks.clear_default_hooks()


# --------------------------------------------------------------------------------------------
# Export fixtures (issue 3): small generated checkpoints and the bundles exported from them.
# Generating the three checkpoints takes seconds, exporting them (dynamo) about half a minute
# each; every export/runtime test module, on every worker, reuses the same ones.
# --------------------------------------------------------------------------------------------

def _built_once(tmp_path_factory, worker_id: str, group: str, names, build) -> Path:
    """The directory holding `build(name, directory / name)` for each of `names`, each built
    once per test run: under pytest-xdist the workers share the run's temporary directory, each
    builds the items no other worker is building, and then waits for the rest (exporting every
    bundle in every worker would cost each of them minutes on the same two cores)."""
    if worker_id == "master":
        root = tmp_path_factory.mktemp(group)
        for name in names:
            build(name, root / name)
        return root
    from filelock import FileLock, Timeout

    root = tmp_path_factory.getbasetemp().parent / group
    root.mkdir(exist_ok=True)
    pending = list(names)
    while pending:
        waiting = len(pending)
        for name in list(pending):
            lock = FileLock(f"{root / name}.lock")
            try:
                lock.acquire(timeout=0 if len(pending) > 1 else -1)
            except Timeout:
                continue  # another worker is building it: build the next one meanwhile
            try:
                if not (root / f"{name}.built").is_file():
                    shutil.rmtree(root / name, ignore_errors=True)
                    build(name, root / name)
                    (root / f"{name}.built").touch()
            finally:
                lock.release()
            pending.remove(name)
        if len(pending) == waiting:
            time.sleep(1)  # every pending item is being built elsewhere
    return root


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory, worker_id):
    """`{kind: Path}` of the small test checkpoints (modernbert-tiny, unigram-tiny, minilm),
    written by laya_edge.export.synthetic with the network off."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from laya_edge.export import synthetic as make_checkpoint

    kinds = make_checkpoint.SMALL_KINDS
    root = _built_once(tmp_path_factory, worker_id, "checkpoints", kinds,
                       lambda kind, out: make_checkpoint.make_checkpoint(kind, out, seed=0))
    return {kind: root / kind for kind in kinds}


@pytest.fixture(scope="session")
def bundles(checkpoints, tmp_path_factory, worker_id):
    """`{kind: Path}` of bundles exported from `checkpoints` with the default exporter. Tests
    read them, never change them: every module and worker shares them."""
    from laya_edge.export import ExportOptions, Progress, export_bundle

    def build(kind: str, out: Path) -> None:
        export_bundle(ExportOptions(source=str(checkpoints[kind]), out=out), Progress(quiet=True))

    root = _built_once(tmp_path_factory, worker_id, "bundles", list(checkpoints), build)
    return {kind: root / kind for kind in checkpoints}


@pytest.fixture
def docs_workdir(tmp_path, monkeypatch, bundles):
    """A working directory for running documentation examples: `./bundles/english` and
    `./bundles/multilingual` are the test bundles, and the Router finds its built-in
    checkpoints there too."""
    (tmp_path / "bundles").mkdir()
    (tmp_path / "bundles" / "english").symlink_to(bundles["modernbert-tiny"])
    (tmp_path / "bundles" / "multilingual").symlink_to(bundles["unigram-tiny"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path / "bundles"))
    return tmp_path
