"""`python -m laya_edge` / `laya-edge`: answer, route and inspect from a shell or a build pipeline.

Exit codes: 0 success; 1 the work failed (a bundle that cannot load, an inference error); 2 bad
usage or input (unreadable JSON, a missing file, an invalid question), reported before any model
loads. Errors are one line on stderr, prefixed with the program name.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

PROG = "laya-edge"


class InputError(ValueError):
    """Bad input from the command line: exit code 2."""


def read_json(argument: str, what: str) -> Any:
    """JSON from a file path, or inline JSON text (an argument starting with `{` or `[`)."""
    text = argument
    if not argument.lstrip().startswith(("{", "[")):
        path = Path(argument)
        if not path.is_file():
            raise InputError(f"{what}: no such file {argument!r}")
        text = path.read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what}: invalid JSON in {argument!r} (line {exc.lineno}, column "
                         f"{exc.colno}: {exc.msg})") from None


def read_state(args: argparse.Namespace) -> Any:
    """The state from --state, --state-file (parsed when it ends in .json) or stdin."""
    if args.state is not None:
        return args.state
    if args.state_file is not None:
        path = Path(args.state_file)
        if path.suffix.lower() == ".json":
            return read_json(str(path), "--state-file")
        if not path.is_file():
            raise InputError(f"--state-file: no such file {args.state_file!r}")
        return path.read_text(encoding="utf-8")
    if sys.stdin is None or sys.stdin.isatty():
        raise InputError("no state: pass --state TEXT, --state-file FILE, or pipe it on stdin")
    return sys.stdin.read()


def router_from_config(spec: Optional[str], require_models: bool, **overrides: Any) -> Any:
    """A Router from a JSON config of its keyword arguments (the built-in setup without one);
    a config it cannot take is bad input."""
    from .router import Router

    config: Dict[str, Any] = {}
    if spec is not None:
        config = read_json(spec, "--model")
        if not isinstance(config, dict):
            raise InputError(f"--model: router config {spec!r} must be a JSON object")
        if require_models and not isinstance(config.get("models"), dict):
            raise InputError(f"--model: router config {spec!r} must be a JSON object with a "
                             "'models' object, e.g. {\"models\": {\"english\": \"./bundle\"}}")
    try:
        return Router(**dict(config, **overrides))
    except (TypeError, ValueError) as exc:
        raise InputError(f"--model: router config {spec!r}: {exc}") from None


def check_bundle_dir(spec: str) -> None:
    """A `--model` that is not a router config must be a bundle directory."""
    if not Path(spec).is_dir():
        raise InputError(f"--model: {spec!r} is neither a bundle directory nor a router config "
                         "(.json)")


def load_model(spec: str, device: Optional[str], precision: Optional[str]) -> Any:
    """A Router when `spec` is a router config (a .json file), else an ONNXAgent on a bundle."""
    if spec.lower().endswith(".json"):
        return router_from_config(spec, True, device=device, precision=precision)
    check_bundle_dir(spec)
    from .onnx_agent import ONNXAgent

    return ONNXAgent(spec, device=device, precision=precision)


def import_hooks(specs: Sequence[str]) -> List[Any]:
    """Hook objects named `module:attribute` (the module importable from here)."""
    import importlib

    hooks = []
    for spec in specs:
        module, _, attribute = spec.partition(":")
        if not module or not attribute:
            raise InputError(f"--hooks: {spec!r} is not MODULE:ATTRIBUTE")
        try:
            hooks.append(getattr(importlib.import_module(module), attribute))
        except (ImportError, AttributeError) as exc:
            raise InputError(f"--hooks: cannot import {spec!r} ({exc})") from None
    return hooks


def serving_router(spec: Optional[str], device: Optional[str], precision: Optional[str],
                   hooks: List[Any]) -> Any:
    """The Router a service answers with: from a router config, the built-in setup, or one
    bundle directory served under both the English and the multilingual name."""
    if spec is None or spec.lower().endswith(".json"):
        return router_from_config(spec, spec is not None, device=device, precision=precision,
                                  hooks=hooks)
    check_bundle_dir(spec)
    from .onnx_agent import ONNXAgent
    from .router import Router

    router = Router(hooks=hooks)
    agent = ONNXAgent(spec, device=device, precision=precision)
    for name in ("english", "multilingual"):
        router.attach(name, agent)
    return router


def emit(data: Any, as_json: bool, table: str) -> None:
    """JSON when asked or when stdout is not a terminal (pipes, build logs); else the table."""
    if as_json or not sys.stdout.isatty():
        print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
    else:
        print(table)


def cmd_predict(args: argparse.Namespace) -> int:
    from .presentation import answers_table

    questions = read_json(args.questions, "--questions")
    if not isinstance(questions, dict) or not questions:
        raise InputError(f"--questions: {args.questions!r} must hold a non-empty JSON object "
                         "of questions, e.g. {\"urgent\": {\"type\": \"noul\", ...}}")
    from .questions import parse_questions

    try:
        parse_questions(questions)
    except (TypeError, ValueError) as exc:
        raise InputError(f"--questions: {exc}") from None
    state = read_state(args)
    model = load_model(args.model, args.device, args.precision)
    try:
        payload = model.predict(state, questions)
    except (TypeError, ValueError) as exc:
        raise InputError(str(exc)) from None
    emit(payload, args.json, answers_table(payload, questions))
    return 0


def cmd_route(args: argparse.Namespace) -> int:
    router = router_from_config(args.model, False)
    decision = dict(router.route(args.text, lang=args.lang, explain=True))
    lines = [f"{'model':<10} {decision['model']}", f"{'reason':<10} {decision['reason']}"]
    detection = decision.get("detection") or {}
    for key in ("script", "language", "is_english"):
        if key in detection:
            lines.append(f"{key:<10} {detection[key]}")
    emit(decision, args.json, "\n".join(lines))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from .bundle_report import describe_bundle, summary_lines

    directory = Path(args.bundle)
    if not directory.is_dir():
        raise InputError(f"{args.bundle!r} is not a bundle directory")
    try:
        report = describe_bundle(directory, args.device, args.precision)
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    emit(report, args.json, "\n".join(summary_lines(report)))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import models_dir, run_demo

    directory = Path(args.models) if args.models else models_dir()
    if args.models and not (directory / "demo.json").is_file():
        raise InputError(f"--models: {args.models!r} has no demo.json")
    return run_demo(directory, args.json)


def ray_setup(spec: Optional[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """`(models, other Router options)` for Ray replicas, which each build their own Router:
    from a router config, the built-in setup, or one bundle for both routes."""
    if spec is None:
        return {}, {}
    if spec.lower().endswith(".json"):
        router_from_config(spec, True)  # a config no Router takes fails here, not on a replica
        config = read_json(spec, "--model")
        return config.pop("models"), config
    check_bundle_dir(spec)
    return {"english": spec, "multilingual": spec}, {}


def serve_on_ray(args: argparse.Namespace, hooks: List[Any], api_key: Optional[str],
                 limits: Any, announcement: str) -> int:
    try:
        import ray
        from ray import serve
    except ImportError as exc:
        raise ImportError(f"--engine ray needs its extra: pip install 'laya-edge[ray]' ({exc})") \
            from None
    from .serving.ray import NAME, deployment

    models, options = ray_setup(args.model)
    options.update(device=args.device, precision=args.precision, hooks=hooks or None)
    print(announcement, file=sys.stderr, flush=True)
    ray.init(address=args.ray_address)
    serve.start(http_options={"host": args.host, "port": args.port})
    serve.run(deployment(models, replicas=args.replicas, num_cpus=args.num_cpus,
                         num_gpus=args.num_gpus, api_key=api_key, limits=limits,
                         router_kwargs=options), name=NAME, route_prefix="/", blocking=True)
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    try:  # checked before any model loads
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the HTTP service needs its extra: pip install 'laya-edge[serve]' "
                          f"({exc})") from None
    from .serving.http import API_KEY_ENV, Limits, run

    limits = Limits(max_body_bytes=args.max_body_bytes, max_questions=args.max_questions,
                    max_concurrent=args.max_concurrent)
    hooks = import_hooks(args.hooks)
    api_key = os.environ.get(API_KEY_ENV) or None
    announcement = (f"{PROG}: serving POST /v1/systemone on http://{args.host}:{args.port} with "
                    f"{args.engine} (bearer auth "
                    f"{'on' if api_key else f'off; set {API_KEY_ENV} to require a token'})")
    if args.engine == "ray":
        return serve_on_ray(args, hooks, api_key, limits, announcement)
    router = serving_router(args.model, args.device, args.precision, hooks)
    if args.preload:
        router.preload(["english", "multilingual"])
    print(announcement, file=sys.stderr, flush=True)
    run(router, args.host, args.port, api_key, limits, args.log_level)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    predict = commands.add_parser("predict", help="answer questions about one state")
    predict.add_argument("--model", required=True,
                         help="bundle directory, or a router config .json ({\"models\": ...})")
    source = predict.add_mutually_exclusive_group()
    source.add_argument("--state", help="the state as text")
    source.add_argument("--state-file", help="read the state from a file (.json is parsed)")
    predict.add_argument("--questions", required=True,
                         help="questions: a JSON file, or inline JSON")
    _device_options(predict)
    predict.add_argument("--json", action="store_true", help="JSON even on a terminal")
    predict.set_defaults(handler=cmd_predict)

    route = commands.add_parser("route", help="which checkpoint a text goes to, and why "
                                               "(loads no model)")
    route.add_argument("text")
    route.add_argument("--lang", help="a language code the caller already knows")
    route.add_argument("--model", help="router config .json (default: the built-in checkpoints)")
    route.add_argument("--json", action="store_true", help="JSON even on a terminal")
    route.set_defaults(handler=cmd_route)

    inspect = commands.add_parser("inspect", help="a bundle's manifest, variants and how it "
                                                  "would run here")
    inspect.add_argument("bundle")
    _device_options(inspect)
    inspect.add_argument("--json", action="store_true", help="JSON even on a terminal")
    inspect.set_defaults(handler=cmd_inspect)

    demo = commands.add_parser("demo", help="the shipped demo model on a few support tickets: "
                                            "routing, hooks, answers, timings (no network)")
    demo.add_argument("--models", help="a folder with demo.json and its bundles (default: the "
                                       "checkout's models/)")
    demo.add_argument("--json", action="store_true", help="one JSON document instead of prose")
    demo.set_defaults(handler=cmd_demo)

    serve = commands.add_parser("serve", help="an HTTP service speaking upstream's POST "
                                              "/v1/systemone (extra: laya-edge[serve])")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--model", help="bundle directory, or a router config .json "
                                       "(default: the built-in checkpoints)")
    _device_options(serve)
    serve.add_argument("--hooks", action="append", default=[], metavar="MODULE:ATTRIBUTE",
                       help="install a hook object on the Router (repeatable)")
    serve.add_argument("--preload", action="store_true",
                       help="load the English and multilingual checkpoints before serving")
    serve.add_argument("--max-body-bytes", type=int, default=1 << 20)
    serve.add_argument("--max-questions", type=int, default=64)
    serve.add_argument("--max-concurrent", type=int, default=8,
                       help="requests answered at once; more get 503")
    serve.add_argument("--engine", choices=("uvicorn", "ray"), default="uvicorn",
                       help="uvicorn: one process (default); ray: Ray Serve replicas with "
                            "request batching (extra: laya-edge[ray])")
    serve.add_argument("--replicas", type=int, default=1, help="--engine ray: replicas")
    serve.add_argument("--num-cpus", type=float, default=1.0,
                       help="--engine ray: CPUs per replica")
    serve.add_argument("--num-gpus", type=float, default=0.0,
                       help="--engine ray: GPUs per replica")
    serve.add_argument("--ray-address", help="--engine ray: an existing cluster (default: "
                                             "start a local Ray instance)")
    serve.add_argument("--log-level", default="info",
                       choices=("critical", "error", "warning", "info", "debug"))
    serve.set_defaults(handler=cmd_serve)

    return parser


def _device_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", help="auto (default), cpu, cuda[:N], tensorrt[:N]")
    parser.add_argument("--precision", help="auto (default), fp32, fp16, int8")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except InputError as exc:
        return _fail(str(exc), 2)
    except BrokenPipeError:
        # The reader went away (`| head`): nothing left to say, and nowhere to say it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError, RuntimeError, ImportError) as exc:
        return _fail(f"{type(exc).__name__}: {exc}", 1)


def _fail(message: str, code: int) -> int:
    print(f"{PROG}: error: {' '.join(message.split())}", file=sys.stderr)
    return code

