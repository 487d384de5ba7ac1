"""Fixtures of the Router tests: upstream's process-wide default hooks cleared around every test,
no hub token or digest pins from the environment, and real agents on the exported bundles."""
import warnings
from pathlib import Path
from typing import Any

import laya.hooks as UH
import pytest


@pytest.fixture(autouse=True)
def _clean_upstream_defaults():
    UH.clear_default_hooks()
    yield
    UH.clear_default_hooks()


@pytest.fixture(autouse=True)
def _no_env(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)


def onnx_agent(bundle: Path, label: str) -> Any:
    from laya_edge.onnx_agent import ONNXAgent

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = ONNXAgent(str(bundle))
    agent.label = label
    return agent


@pytest.fixture(scope="module")
def real_agents(bundles):
    return (onnx_agent(bundles["modernbert-tiny"], "onnx-en"),
            onnx_agent(bundles["unigram-tiny"], "onnx-ml"))
