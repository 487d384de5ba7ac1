"""Build-time half of laya_edge: export a Laya checkpoint to a verified ONNX bundle.

Needs the `export` extra (torch, upstream laya, onnx, onnxscript). Nothing in the runtime
imports this package; run it as `python -m laya_edge.export`.
"""
from .pipeline import ExportOptions, Progress, export_bundle
from .verify import VerificationError

__all__ = ["ExportOptions", "Progress", "VerificationError", "export_bundle"]
