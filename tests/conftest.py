"""Shared fixtures: a clean process-wide hook registry around every test."""
import pytest

from laya_edge import hooks as edge_hooks


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
