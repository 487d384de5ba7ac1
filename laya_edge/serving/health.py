"""Whether the HTTP service can answer: per checkpoint whether it can load (its files and
manifest, checked for real but without reading weights), what failed to load, and readiness.

A checkpoint that failed to load stays reported, with the failure, until it loads; a hub source
or one built by a custom `agent_factory` can only be checked by loading it, so until a load
fails it counts as loadable (`"loadable": null`).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Dict, Optional, Sequence, Tuple

from ..bundle_format import check_present
from ..bundle_source import resolve

_log = logging.getLogger("laya_edge.serve")
Loadable = Tuple[Optional[bool], Optional[str]]


def check_loadable(router: Any, name: str) -> Loadable:
    """`(loadable, reason)` of a checkpoint that is not resident: where the Router would build
    it from, whether that bundle's manifest reads and every file it lists is there."""
    if getattr(router, "agent_factory", None) is not None:
        return None, "built by the Router's agent_factory: checked only by loading it"
    try:
        repo, options = router.source_for_build(name)
        repo = os.fspath(repo)
        if not os.path.exists(repo) and not os.path.isabs(repo) and not repo.startswith("."):
            return None, f"hub repository {repo!r}: checked only by loading it"
        source = resolve(repo, subfolder=options.get("subfolder"))
        if source.manifest is not None:
            check_present(source.directory, source.manifest)
    except Exception as exc:  # whatever stops the check would stop the load: report it
        return False, str(exc) or type(exc).__name__
    return True, None


class Health:
    """The service's view of its Router: what loads, what failed, and the models it preloads
    (readiness waits for all of them)."""

    def __init__(self, router: Any, preload: Sequence[str] = ()):
        self.router = router
        self.preload = tuple(router.resolve(name) for name in preload)
        self.started = time.time()

    def failed_load(self, exc: BaseException) -> Optional[str]:
        """The checkpoint whose build raised `exc` (the Router's `load_failures`), or None when
        `exc` did not come from a build. A batch answered request by request retries the build
        once per request, so an equal error (same type and message) counts too."""
        return next((name for name, failure in self.router.load_failures().items()
                     if failure is exc or (type(failure) is type(exc)
                                           and str(failure) == str(exc))), None)

    def start_preload(self) -> None:
        """Load the preloaded models in the background, so the service is live meanwhile."""
        if self.preload:
            threading.Thread(target=self._preload, name="laya-edge-preload", daemon=True).start()

    def _preload(self) -> None:
        for name in self.preload:
            try:
                self.router.preload([name])
            except Exception:  # the Router's load_failures keeps it for readiness
                _log.exception("preloading %r failed", name)

    def models(self) -> Dict[str, Dict[str, Any]]:
        """Per checkpoint: `loadable` (true, false, or null: unknown until it loads), `loaded`,
        and the `reason` it cannot load or could not be checked."""
        loaded = set(self.router.loaded)
        failures = {name: f"{type(exc).__name__}: {exc}"
                    for name, exc in self.router.load_failures().items()}
        report = {}
        for name in sorted(self.router.models):
            if name in loaded:
                loadable, reason = True, None
            elif name in failures:
                loadable, reason = False, f"failed to load: {failures[name]}"
            else:
                loadable, reason = check_loadable(self.router, name)
            report[name] = dict({"loadable": loadable, "loaded": name in loaded},
                                **({"reason": reason} if reason else {}))
        return report

    def unready(self, models: Dict[str, Dict[str, Any]]) -> Optional[str]:
        """Why the service cannot answer yet, or None when it can."""
        if self.preload:
            waiting = [models[name] for name in self.preload if not models[name]["loaded"]]
            if any(model["loadable"] is False for model in waiting):
                return "a preloaded model cannot load"
            return "still preloading" if waiting else None
        if all(model["loadable"] is False for model in models.values()):
            return "no model can load"
        return None

    def report(self, full: bool) -> Tuple[int, Dict[str, Any]]:
        """`(status code, body)` of a readiness probe; `full` adds what is loaded and why a
        model cannot load (for a caller with a valid token)."""
        from .. import __version__

        models = self.models()
        reason = self.unready(models)
        body: Dict[str, Any] = {"status": "ok" if reason is None else "unavailable"}
        if reason is not None:
            body["reason"] = reason
        if full:
            body.update(version=__version__, loaded=self.router.loaded, models=models,
                        uptime_s=round(time.time() - self.started, 1))
        return (200 if reason is None else 503), body
