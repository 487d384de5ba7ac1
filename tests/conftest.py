"""Shared fixtures: a clean process-wide hook registry around every test, and the small
generated checkpoints and their exported bundles (session-scoped, shared by every module)."""
import os
from pathlib import Path

import pytest

from laya_edge import hooks as edge_hooks


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
# Session-scoped: generating the three checkpoints takes seconds, exporting them (dynamo) about
# half a minute each, and every export/runtime test module reuses the same ones.
# --------------------------------------------------------------------------------------------

@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory):
    """`{kind: Path}` of the small test checkpoints (modernbert-tiny, unigram-tiny, minilm),
    written by laya_edge.export.synthetic with the network off."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    from laya_edge.export import synthetic as make_checkpoint
    root = tmp_path_factory.mktemp("checkpoints")
    return {kind: Path(make_checkpoint.make_checkpoint(kind, root / kind, seed=0))
            for kind in make_checkpoint.SMALL_KINDS}


@pytest.fixture(scope="session")
def bundles(checkpoints, tmp_path_factory):
    """`{kind: Path}` of bundles exported from `checkpoints` with the default exporter."""
    from laya_edge.export import ExportOptions, Progress, export_bundle

    root = tmp_path_factory.mktemp("bundles")
    exported = {}
    for kind, directory in checkpoints.items():
        export_bundle(ExportOptions(source=str(directory), out=root / kind), Progress(quiet=True))
        exported[kind] = root / kind
    return exported


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
