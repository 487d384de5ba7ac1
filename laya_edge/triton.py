"""Deprecated import path of the Triton client, kept for one release: use
laya_edge.serving.triton."""
import warnings

from .serving.triton import TritonAgent, TritonSession

__all__ = ["TritonAgent", "TritonSession"]

warnings.warn("laya_edge.triton moved to laya_edge.serving.triton; the old path goes away in the "
              "next release", DeprecationWarning, stacklevel=2)
