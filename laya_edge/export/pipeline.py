"""The export pipeline: checkpoint -> verified, self-contained bundle directory.

Stages run in order (download, build, export, optimise, verify, write), each logged with its
duration. Everything is built in a temporary directory beside the output and renamed into place
at the end, so a failed or interrupted export never leaves a half-written bundle.
"""
from __future__ import annotations

import datetime
import json
import logging
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .. import __version__
from ..bundle_format import (CONFIG, FORMAT, FORMAT_VERSION, GRAPH, MANIFEST, TOKENIZER_DIR,
                             TOKENIZER_FILES, digests, files_under, write_manifest)
from ..tokenizer import load_tokenizer, special_tokens
from . import checkpoint as ckpt
from .forward import readout_module, supports_readout
from .fusion import fuse_for_ort
from .graph import DEFAULT_OPSET, describe, export_graph
from .graph_limits import position_limit, shape_ranges
from .candidates import best_candidate, remove_graph, replace_graph, variant_entry, verified
from .int8_variant import int8_variant
from .precision import VARIANT_FILES, to_fp16
from .probes import held_out_cases, probe_cases
from .logs import third_party_quiet
from .verify import require_pass, run_reference

_log = logging.getLogger("laya_edge.export")
READOUT = ("read-out: the last head layer evaluated at the option markers and position 0 only, "
           "head projection weights split")


@dataclass
class ExportOptions:
    """What to export and how; the CLI fills it from arguments and an optional recipe."""

    source: str
    out: Path
    subfolder: Optional[str] = None
    revision: Optional[str] = None
    token: Optional[str] = None
    force: bool = False
    skip_verify: bool = False
    exporter: str = "auto"
    opset: int = DEFAULT_OPSET
    external_data: Optional[bool] = None
    shape_ranges: Dict[str, Dict[str, int]] = field(default_factory=dict)
    precisions: Tuple[str, ...] = ("fp32",)
    ship: Optional[Tuple[str, ...]] = None  # variants written to the bundle; None: all built
    int8_embeddings: bool = False
    allow_slow_int8: bool = False
    int8_weight_only: bool = False
    fuse: bool = True
    readout: bool = True
    probe_seed: int = 0
    recipe: Optional[str] = None


class Progress:
    """Stage timings, logged to the `laya_edge.export` logger at INFO.

    Where the lines go is the logging set-up's choice (`python -m laya_edge.export` sends them
    to stderr unless --quiet). `quiet` also keeps the third-party libraries' own notes out of
    the user's logs (`logs.third_party_quiet`): a quiet build prints nothing on success."""

    def __init__(self, quiet: bool = False):
        self.quiet = quiet
        self.durations: Dict[str, float] = {}

    def log(self, message: str) -> None:
        if not self.quiet:
            _log.info(message)

    @contextmanager
    def muted(self) -> Iterator[None]:
        """Under quiet, the third-party libraries' notes are held back for the duration."""
        if not self.quiet:
            yield
            return
        import torch  # noqa: F401 -- its import resets its loggers' levels, so it goes first

        with third_party_quiet():
            yield

    @contextmanager
    def stage(self, name: str, what: str) -> Iterator[None]:
        self.log(f"{name}: {what} ...")
        started = time.perf_counter()
        yield
        self.durations[name] = round(time.perf_counter() - started, 3)
        self.log(f"{name}: done in {self.durations[name]:.2f}s")


def _versions() -> Dict[str, Optional[str]]:
    found: Dict[str, Optional[str]] = {"laya_edge": __version__}
    for package in ("torch", "onnx", "onnxscript", "onnxruntime", "laya", "transformers",
                    "tokenizers"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def _prepare_output(out: Path, force: bool) -> Path:
    """Refuse to clobber a bundle by accident; return the temporary build directory."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"--out {str(out)!r} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise FileExistsError(f"--out {str(out)!r} is not empty; pass --force to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))


def _publish(build: Path, out: Path) -> None:
    """Move the finished bundle into place; the old one goes only once the new one is there."""
    retired = None
    if out.exists():
        retired = out.with_name(f".{out.name}.{time.time_ns()}.old")
        out.rename(retired)
    # mkdtemp's 0700, and the 0600 some writers give weight files, would hide the bundle from
    # a service user: a bundle is published readable by all, writable by its owner.
    build.chmod(0o755)
    for path in build.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    build.rename(out)
    if retired is not None:
        shutil.rmtree(retired, ignore_errors=True)


def _copy_runtime_files(checkpoint: ckpt.Checkpoint, build: Path) -> None:
    """The config and tokenizer files, `tokenizer.json` without its indentation: the same
    tokenizer in about two thirds of the bytes (MiniLM's: 711 KB before, 466 KB after)."""
    shutil.copy2(checkpoint.directory / CONFIG, build / CONFIG)
    (build / TOKENIZER_DIR).mkdir()
    for name in TOKENIZER_FILES:
        source, target = checkpoint.directory / TOKENIZER_DIR / name, build / TOKENIZER_DIR / name
        if not source.is_file():
            continue
        if name == "tokenizer.json":
            target.write_text(json.dumps(json.loads(source.read_text(encoding="utf-8")),
                                         ensure_ascii=False, separators=(",", ":")),
                              encoding="utf-8")
        else:
            shutil.copy2(source, target)


def export_bundle(options: ExportOptions, progress: Optional[Progress] = None) -> Dict[str, Any]:
    """Export `options.source` to `options.out` and return the run's summary."""
    progress = progress or Progress()
    out = Path(options.out)
    build = _prepare_output(out, options.force)
    try:
        with progress.muted():
            manifest, reference_report = _build(options, build, progress)
            with progress.stage("write", f"publishing {out}"):
                write_manifest(build, manifest)
                _publish(build, out)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return {"out": str(out), "format_version": FORMAT_VERSION,
            "exporter": manifest["graph"]["exporter"],
            "verification": reference_report,
            "variants": {precision: {key: entry[key] for key in ("files", "bytes",
                                                                  "verification", "speed")
                                     if key in entry}
                         for precision, entry in manifest["variants"].items()},
            "bytes": sum(entry["bytes"] for entry in manifest["files"].values()),
            "stages": progress.durations}


def _build(options: ExportOptions, build: Path,
           progress: Progress) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The manifest of the bundle built in `build`, and the fp32 graph's verification report."""
    with progress.stage("download", f"locating {options.source}"):
        checkpoint = ckpt.check(ckpt.locate(options.source, options.subfolder, options.revision,
                                            options.token), options.source)
        source_files = digests(checkpoint.directory, checkpoint.files())
        _copy_runtime_files(checkpoint, build)
    with progress.stage("build", "building the PyTorch reference with upstream laya"):
        from .reference import Reference

        reference = Reference(checkpoint.directory)
        max_len = int(checkpoint.config.get("max_len", 512))
        runs = run_reference(reference, probe_cases(max_len, options.probe_seed))
        # int8 is chosen among candidates on `runs`, then verified on probes none was chosen on
        held_out = (run_reference(reference, held_out_cases(max_len, options.probe_seed))
                    if "int8" in options.precisions and not options.skip_verify else [])
    graph_path = build / GRAPH
    readout = options.readout and supports_readout(reference.model)
    if options.readout and not readout:
        progress.log("export: the head has no pre-norm layers to evaluate at the read "
                     "positions only; exporting the model's own forward")
    module = readout_module(reference.model) if readout else reference.model
    with progress.stage("export", f"torch.onnx.export ({options.exporter})"):
        graph_info = export_graph(module, runs[0].batch, graph_path,
                                  exporter=options.exporter, opset=options.opset,
                                  external_data=options.external_data, log=progress.log)
    graph_info["forward"] = "readout" if readout else "model"
    with progress.stage("optimise", "checking the graph"):
        import onnx

        onnx.checker.check_model(str(graph_path))
        graph_info.update(describe(graph_path))
        optimisations = (["onnxscript.optimizer (dynamo exporter: constant folding, "
                          "dead-code elimination)"] if graph_info["exporter"] == "dynamo"
                         else ["constant folding (TorchScript exporter)"])
        if readout:
            optimisations.append(READOUT)
    if options.skip_verify:
        progress.log("verify: skipped (--skip-verify)")
        report = verified(graph_path, "fp32", runs, reference, skip=True)
    else:
        with progress.stage("verify", f"{sum(len(r.rows) for r in runs)} probe rows, torch vs "
                                      "onnxruntime"):
            report = verified(graph_path, "fp32", runs, reference, skip=False)
            require_pass(report, graph_path)
    fused = None
    if options.fuse:
        with progress.stage("fuse", "onnxruntime fusions (attention, GELU)"):
            fused = _fuse(graph_path, graph_info["external_data"], runs, reference, options,
                          progress)
    fused_optimisations = optimisations + ([fused[1]] if fused else [])
    variants = {}
    for precision in options.precisions:
        if precision == "fp32":
            continue
        # fp16 from the plain graph: the fp16 conversion breaks the fused attention kernels.
        # int8 from the fused one, whose packed attention weights quantise too (QAttention).
        source, inherited = ((fused[0], fused_optimisations) if fused and precision == "int8"
                             else (graph_path, optimisations))
        with progress.stage(precision, f"building and verifying the {precision} variant"):
            variants[precision] = _reduced_variant(precision, options, build, source,
                                                   graph_info["external_data"], runs, reference,
                                                   list(inherited), (graph_path, optimisations),
                                                   held_out, progress)
    if fused:
        replace_graph(graph_path, fused[0])
        optimisations, report = fused_optimisations, fused[2]
        graph_info.update(describe(graph_path))
    variants = {"fp32": variant_entry(build, GRAPH, "fp32", optimisations, report), **variants}
    for precision in set(variants) - set(options.ship or variants):
        remove_graph(build / variants.pop(precision)["files"][0])
    tokenizer_dir = build / TOKENIZER_DIR
    specials = special_tokens(tokenizer_dir, load_tokenizer(tokenizer_dir).tokenizer)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "source": dict(checkpoint.source, files=source_files,
                       recipe=options.recipe),
        "special_tokens": {role: {"text": token.text, "id": token.id}
                           for role, token in specials.items()},
        "mask_token": specials["mask"].text,
        "graph": dict(graph_info, shape_ranges=shape_ranges(options.shape_ranges, reference),
                      **position_limit(reference)),
        "versions": _versions(),
        "variants": variants,
        "files": digests(build, [name for name in files_under(build) if name != MANIFEST],
                         blocks=True),
    }, report


def _fuse(graph: Path, external: bool, runs: List[Any], reference: Any, options: ExportOptions,
          progress: Progress) -> Optional[Tuple[Path, str, Dict[str, Any]]]:
    """The fused form of the graph, built beside it, when it passes verification too:
    `(fused graph, what was applied, its report)`, or None when the plain graph is kept."""
    staging = graph.parent / "fused"
    staging.mkdir()
    candidate = staging / graph.name
    try:
        applied = fuse_for_ort(graph, candidate, external)
        report = verified(candidate, "fp32", runs, reference, options.skip_verify)
    except Exception as exc:  # a rewriter failure costs speed, never the export
        progress.log(f"fuse: kept the plain graph ({type(exc).__name__}: {exc})")
        shutil.rmtree(staging)
        return None
    if not applied or not (report["passed"] or report["skipped"]):
        progress.log("fuse: kept the plain graph (" + ("nothing to fuse" if not applied else
                     "the fused graph failed verification") + ")")
        shutil.rmtree(staging)
        return None
    return candidate, "onnxscript ORT fusions: " + ", ".join(
        f"{name} x{count}" for name, count in sorted(applied.items())), report


def _reduced_variant(precision: str, options: ExportOptions, build: Path, source_graph: Path,
                     external: bool, runs: List[Any], reference: Any, inherited: List[str],
                     plain: Tuple[Path, List[str]], held_out: List[Any],
                     progress: Progress) -> Dict[str, Any]:
    """Build the variant from `source_graph` (`inherited`: what was done to that graph), verify
    it against PyTorch and refuse it when it misses its thresholds; int8 is chosen, held-out
    verified and timed by `int8_variant`, its weight-only fallback made from `plain` (the
    unfused graph and its list)."""
    if precision == "int8":
        return int8_variant(options, build, source_graph, external, runs, held_out, reference,
                            inherited, plain, progress.log)
    candidate, optimisations, report = best_candidate(
        VARIANT_FILES[precision], [(lambda target: to_fp16(source_graph, target, external),
                                    inherited)], build, precision, runs, reference,
        options.skip_verify)
    require_pass(report, build / candidate.name)
    replace_graph(build / candidate.name, candidate)
    return variant_entry(build, candidate.name, precision, optimisations, report)


def read_recipe(path: Any) -> Dict[str, Any]:
    with open(path, encoding="utf-8") as handle:
        recipe = json.load(handle)
    if not isinstance(recipe, dict) or "repo" not in recipe:
        raise ValueError(f"recipe {str(path)!r} must be a JSON object with at least 'repo'")
    return recipe

