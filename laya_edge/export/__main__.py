"""`python -m laya_edge.export SOURCE --out DIR`: a Laya checkpoint in, a verified bundle out.

Exit status: 0 exported, 1 the export failed (the message says why), 2 bad arguments,
3 the graph failed verification against the PyTorch model.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

PROG = "python -m laya_edge.export"
EPILOG = """\
examples:
  python -m laya_edge.export ./my-checkpoint --out ./bundles/english
  python -m laya_edge.export convaiinnovations/laya --subfolder multilingual --out ./ml
  python -m laya_edge.export --recipe export/english.json --json
      (writes ~/.cache/laya_edge/bundles/english, where laya_edge.Router looks for it)

The bundle holds rl_agent_config.json, tokenizer/, laya.onnx with its weights in
laya.onnx.data, and the manifest laya_edge.json with hashes and the verification report.
"""


class OneLineParser(argparse.ArgumentParser):
    """Argument errors as one line (build pipelines grep logs), exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{PROG}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog=PROG, description=__doc__.splitlines()[0],
                           epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", nargs="?",
                        help="local checkpoint directory or Hugging Face repo id "
                             "(optional with --recipe, which names the repo)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="bundle directory to write (must be empty or absent unless --force); "
                             "with --recipe it defaults to $LAYA_EDGE_MODELS/<recipe name> "
                             "(~/.cache/laya_edge/bundles/<name>), where the Router looks")
    parser.add_argument("--subfolder", help="checkpoint subfolder inside the repo or directory")
    parser.add_argument("--revision", help="hub branch, tag or commit to download")
    parser.add_argument("--token", help="hub token (default: $HF_TOKEN or the cached login)")
    parser.add_argument("--recipe", metavar="FILE",
                        help="JSON defaults for a published checkpoint (repo, subfolder, "
                             "budgets, shape ranges), e.g. export/english.json")
    parser.add_argument("--force", action="store_true", help="replace a non-empty --out")
    parser.add_argument("--skip-verify", action="store_true",
                        help="experts only: do not compare the graph with PyTorch "
                             "(recorded in the manifest)")
    parser.add_argument("--exporter", choices=("auto", "dynamo", "torchscript"), default="auto",
                        help="torch.onnx exporter (default auto: dynamo, TorchScript if dynamo "
                             "fails)")
    parser.add_argument("--opset", type=int, default=None, help="ONNX opset (default 18)")
    data = parser.add_mutually_exclusive_group()
    data.add_argument("--external-data", dest="external_data", action="store_true", default=None,
                      help="store weights in laya.onnx.data (the default: onnxruntime maps "
                           "the file instead of copying the weights, so loads are faster)")
    data.add_argument("--no-external-data", dest="external_data", action="store_false",
                      help="keep weights inside laya.onnx (one file per graph; refused above "
                           "the 2 GB protobuf limit)")
    parser.add_argument("--precision", default="fp32", metavar="LIST",
                        help="variants to build, comma-separated from fp32,fp16,int8 (fp32 is "
                             "always kept as the reference); each is verified against PyTorch "
                             "(int8: argmax agreement >= 99%%, fp16: >= 99.5%%, max |dp| <= 0.05)")
    parser.add_argument("--ship", metavar="LIST",
                        help="variants whose graphs go into the bundle (default: every one "
                             "built); e.g. --precision int8 --ship int8 for a small CPU-only "
                             "bundle, fp32 still verified but not written")
    parser.add_argument("--int8-embeddings", action="store_true",
                        help="also quantise the embedding table in the int8 variant (smaller)")
    parser.add_argument("--allow-slow-int8", action="store_true",
                        help="ship an int8 variant even when it is not faster than fp32 on this "
                             "machine (the export times both; without this flag a slow int8 "
                             "fails the export, and precision='auto' prefers fp32 over one)")
    parser.add_argument("--int8-weight-only", action="store_true",
                        help="make the int8 variant weight-only (int8 weights, fp32 compute): "
                             "the smallest verified int8 graph, chosen for size, so not refused "
                             "for being slower than fp32; skips dynamic quantisation and its "
                             "search")
    parser.add_argument("--no-fuse", dest="fuse", action="store_false",
                        help="keep the plain ONNX graph: no onnxruntime fusions (attention, GELU); "
                             "the fused graph runs on onnxruntime only")
    parser.add_argument("--no-readout", dest="readout", action="store_false",
                        help="export the model's own forward, which computes every position of "
                             "the last head layer (default: only the option markers and position "
                             "0, which the outputs read; same answers, less compute)")
    parser.add_argument("--probe-seed", type=int, default=0,
                        help="seed of the generated verification probe set (default 0)")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--json", action="store_true",
                        help="print a machine-readable summary on stdout")
    parser.add_argument("--triton-repo", type=Path, metavar="DIR",
                        help="also write a Triton Inference Server model repository for the "
                             "bundle (see --triton-flavour)")
    parser.add_argument("--triton-flavour", choices=("onnxruntime", "python"),
                        default="onnxruntime",
                        help="onnxruntime: the graph on Triton's ONNX Runtime backend, one model "
                             "per exported precision plus a TensorRT one (token ids in, "
                             "TritonAgent tokenises); python: a Python-backend model that runs "
                             "ONNXAgent inside Triton (text and questions in, JSON answers out)")
    parser.add_argument("--triton-engine-cache", type=Path, metavar="DIR",
                        help="onnxruntime flavour: absolute path, on the Triton server, where "
                             "the TensorRT model caches its engines (created here; default: no "
                             "cache, engines are rebuilt on every load)")
    return parser


def options_from_args(args: argparse.Namespace, parser: argparse.ArgumentParser):
    from ..bundle_format import default_bundle_dir
    from .graph import DEFAULT_OPSET
    from .pipeline import ExportOptions, read_recipe
    from .precision import parse_precisions, parse_ship

    recipe = read_recipe(args.recipe) if args.recipe else {}
    source = args.source or recipe.get("repo")
    if not source:
        parser.error("SOURCE is required unless --recipe names a repo")
    try:
        precisions = parse_precisions(args.precision)
    except ValueError as exc:
        parser.error(f"argument --precision: {exc}")
    try:
        ship = precisions if args.ship is None else parse_ship(args.ship, precisions)
    except ValueError as exc:
        parser.error(f"argument --ship: {exc}")
    if args.triton_engine_cache is not None:
        if args.triton_repo is None or args.triton_flavour != "onnxruntime":
            parser.error("--triton-engine-cache applies to --triton-repo with the onnxruntime "
                         "flavour (its TensorRT model)")
        if not args.triton_engine_cache.is_absolute():
            parser.error("argument --triton-engine-cache: an absolute path on the Triton server "
                         "(Triton resolves a relative one against its own working directory), "
                         f"got {str(args.triton_engine_cache)!r}")
    out = args.out
    if out is None:
        if not args.recipe:
            parser.error("--out is required unless --recipe is given")
        out = default_bundle_dir(Path(args.recipe).stem)
    shapes = dict(recipe.get("shape_ranges", {}))
    budgets = recipe.get("budgets", {})
    if "max_len" in budgets:
        shapes["sequence"] = dict(shapes.get("sequence", {}), max=int(budgets["max_len"]))
    return ExportOptions(
        source=source, out=out,
        subfolder=args.subfolder if args.subfolder is not None else recipe.get("subfolder"),
        revision=args.revision or recipe.get("revision"), token=args.token,
        force=args.force, skip_verify=args.skip_verify, exporter=args.exporter,
        opset=args.opset or recipe.get("opset", DEFAULT_OPSET),
        external_data=args.external_data, shape_ranges=shapes, probe_seed=args.probe_seed,
        precisions=precisions, ship=ship, int8_embeddings=args.int8_embeddings,
        allow_slow_int8=args.allow_slow_int8, int8_weight_only=args.int8_weight_only,
        fuse=args.fuse,
        readout=args.readout,
        recipe=os.path.basename(args.recipe) if args.recipe else None)


def main(argv: Optional[Sequence[str]] = None) -> int:
    # Imported before the try: its except clauses name VerificationError, so an error raised
    # while reading the options (a bad --recipe) must not find the name unbound. Both modules
    # are cheap; torch is only imported once the export runs.
    from .logs import progress_on_stderr
    from .pipeline import Progress, export_bundle
    from .verify import VerificationError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args, parser)
        with contextlib.ExitStack() as progress:
            if not args.quiet:
                progress.enter_context(progress_on_stderr("laya_edge.export", "laya_edge.export"))
            summary = export_bundle(options, Progress(quiet=args.quiet))
        if args.triton_repo is not None:
            from .triton_repository import write_triton_repo

            models = write_triton_repo(Path(summary["out"]), args.triton_repo,
                                       flavour=args.triton_flavour,
                                       engine_cache=args.triton_engine_cache)
            summary["triton_repo"] = {name: str(path) for name, path in models.items()}
    except VerificationError as exc:
        _fail(str(exc))
        if args.json:
            print(json.dumps({"ok": False, "error": str(exc), "verification": exc.report}))
        return 3
    except (OSError, ValueError, RuntimeError, ImportError) as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        if args.json:
            print(json.dumps({"ok": False, "error": f"{type(exc).__name__}: {exc}"}))
        return 1
    if args.json:
        print(json.dumps(dict(summary, ok=True)))
    elif not args.quiet:
        report = summary["verification"]
        verdict = ("verification skipped" if report.get("skipped") else
                   f"verified: argmax agreement {report['argmax_agreement']:.4f}, "
                   f"max |dp| {report['max_abs_p']:.2e}")
        print(f"{PROG}: wrote {summary['out']} ({summary['bytes'] / 1e6:.1f} MB, "
              f"{summary['exporter']} exporter, {verdict})", file=sys.stderr)
        for name, path in summary.get("triton_repo", {}).items():
            print(f"{PROG}: wrote Triton model {name!r} at {path}", file=sys.stderr)
    return 0


def _fail(message: str) -> None:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
