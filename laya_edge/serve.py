"""Deprecated import path of the HTTP service, kept for one release: use laya_edge.serving.http."""
import warnings

from .serving.http import API_KEY_ENV, HTTPError, Limits, create_app, run

__all__ = ["API_KEY_ENV", "HTTPError", "Limits", "create_app", "run"]

warnings.warn("laya_edge.serve moved to laya_edge.serving.http; the old path goes away in the "
              "next release", DeprecationWarning, stacklevel=2)
