"""Build-time half of laya_edge: export a Laya checkpoint to a verified ONNX bundle.

Needs the `export` extra (torch, upstream laya, onnx, onnxscript). Nothing in the runtime
imports this package; run it as `python -m laya_edge.export`. `laya_edge.export.synthetic`
writes small random Laya checkpoints offline, for testing an export pipeline (and this
repository's tests and benchmarks).
"""
from .pipeline import ExportOptions, Progress, export_bundle
from .verify import VerificationError

__all__ = ["ExportOptions", "Progress", "VerificationError", "export_bundle"]
