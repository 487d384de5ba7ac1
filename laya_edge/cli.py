"""`python -m laya_edge` / `laya-edge`: answer, route, inspect and verify from a shell or a pipeline.

Exit codes: 0 success; 1 the work failed (a bundle that cannot load or fails `verify`, an
inference error, an address `serve` cannot listen on); 2 bad usage or input (an unknown option
value, unreadable JSON or state text, a missing file, an invalid question), reported before any
model loads. Errors are one line on stderr, prefixed with the program name; so are the warnings
the runtime raises while a command runs (`laya-edge: warning: ...`).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .cli_args import PROG, build_parser
from .cli_input import InputError, read_json, read_state


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
                   hooks: List[Any]) -> Callable[[], Any]:
    """What builds the Router a service answers with: from a router config, the built-in setup,
    or one bundle directory served under both the English and the multilingual name. The input
    is checked now; a bundle loads when the returned function is called."""
    if spec is None or spec.lower().endswith(".json"):
        router = router_from_config(spec, spec is not None, device=device, precision=precision,
                                    hooks=hooks)
        return lambda: router
    check_bundle_dir(spec)

    def build() -> Any:
        from .onnx_agent import ONNXAgent
        from .router import Router

        # registered under its path too, so routing.repo names the bundle that answers
        router = Router(models={"english": spec, "multilingual": spec}, hooks=hooks)
        agent = ONNXAgent(spec, device=device, precision=precision)
        for name in ("english", "multilingual"):
            router.attach(name, agent)
        return router

    return build


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


def bundle_directory(argument: str) -> Path:
    """The BUNDLE argument of `inspect` and `verify`: it must be a directory."""
    if not Path(argument).is_dir():
        raise InputError(f"{argument!r} is not a bundle directory")
    return Path(argument)


def cmd_inspect(args: argparse.Namespace) -> int:
    from .bundle_report import describe_bundle, summary_lines

    directory = bundle_directory(args.bundle)
    try:
        report = describe_bundle(directory, args.device, args.precision)
    except (ValueError, FileNotFoundError) as exc:
        raise InputError(str(exc)) from None
    emit(report, args.json, "\n".join(summary_lines(report)))
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    """The report on stdout; each problem also as an error line on stderr, and exit 1."""
    from .bundle_report import check_bundle, check_lines

    report = check_bundle(bundle_directory(args.bundle))
    emit(report, args.json, "\n".join(check_lines(report)))
    for problem in report["problems"]:
        _fail(problem, 1)
    return 0 if report["ok"] else 1


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
                 limits: Any, announcement: str) -> Callable[[], int]:
    """What starts Ray Serve replicas, each building its own Router; the models are checked
    now, Ray starts when the returned function is called."""
    models, options = ray_setup(args.model)
    options.update(device=args.device, precision=args.precision, hooks=hooks or None)

    def start() -> int:
        try:
            import ray
            from ray import serve
        except ImportError as exc:
            raise ImportError(f"--engine ray needs its extra: pip install 'laya-edge[ray]' "
                              f"({exc})") from None
        from .serving.ray import NAME, deployment

        print(announcement, file=sys.stderr, flush=True)
        ray.init(address=args.ray_address)
        serve.start(http_options={"host": args.host, "port": args.port})
        batching = {"max_batch_size": args.max_batch or 16,
                    "batch_wait_timeout_s": args.max_wait_ms / 1000.0}
        serve.run(deployment(models, replicas=args.replicas, num_cpus=args.num_cpus,
                             num_gpus=args.num_gpus, api_key=api_key, limits=limits,
                             router_kwargs=options, **batching),
                  name=NAME, route_prefix="/", blocking=True)
        return 0

    return start


def serve_on_uvicorn(args: argparse.Namespace, hooks: List[Any], api_key: Optional[str],
                     limits: Any, announcement: str) -> Callable[[], int]:
    """What serves one Router with uvicorn; the model is checked now, loaded (and uvicorn
    started) when the returned function is called."""
    from .serving.http import run

    build = serving_router(args.model, args.device, args.precision, hooks)

    def start() -> int:
        router = build()
        print(announcement, file=sys.stderr, flush=True)
        run(router, args.host, args.port, api_key, limits, args.log_level,
            preload=("english", "multilingual") if args.preload else ())
        return 0

    return start


def cmd_serve(args: argparse.Namespace) -> int:
    """Input first (exit 2), then the address (exit 1), then the models load and serving
    starts."""
    try:  # checked before any model loads
        import pydantic  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"the HTTP service needs its extra: pip install 'laya-edge[serve]' "
                          f"({exc})") from None
    from .serving.http import API_KEY_ENV, Limits

    limits = Limits(max_body_bytes=args.max_body_bytes, max_questions=args.max_questions,
                    max_concurrent=args.max_concurrent, max_queue=args.max_queue,
                    queue_timeout_s=args.queue_timeout_s, max_batch=args.max_batch,
                    max_wait_ms=args.max_wait_ms, drain_timeout_s=args.drain_timeout_s)
    hooks = import_hooks(args.hooks)
    api_key = os.environ.get(API_KEY_ENV) or None
    announcement = (f"{PROG}: serving POST /v1/systemone on http://{args.host}:{args.port} with "
                    f"{args.engine} (bearer auth "
                    f"{'on' if api_key else f'off; set {API_KEY_ENV} to require a token'})")
    engine = serve_on_ray if args.engine == "ray" else serve_on_uvicorn
    start = engine(args, hooks, api_key, limits, announcement)
    check_address(args.host, args.port)
    return start()


def check_address(host: str, port: int) -> None:
    """Bind the address once, as uvicorn will, before any model loads: a port in use or a host
    that does not resolve fails here, not after `serving on ...` was printed."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except (OSError, OverflowError, UnicodeError) as exc:
        raise OSError(f"cannot listen on {host}:{port} ({getattr(exc, 'strerror', None) or exc}); "
                      "free the port or pass another --port or --host") from None


HANDLERS = {"predict": cmd_predict, "route": cmd_route, "inspect": cmd_inspect,
            "verify": cmd_verify, "demo": cmd_demo, "serve": cmd_serve}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command line: usage errors exit 2 from argparse; the rest as the module says."""
    args = build_parser(__doc__.split("\n\n")[0]).parse_args(argv)
    with warnings_as_lines():
        return _run(args)


@contextlib.contextmanager
def warnings_as_lines() -> Iterator[None]:
    """While a command runs, each Python warning it raises (any category, from any code the
    command calls) is one `laya-edge: warning: ...` line on stderr instead of Python's
    `file:line: Category: ...` with a source line; the filters in force still decide which are
    shown. The previous display and filters are back afterwards."""
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        yield


def _show_warning(message: Any, category: Any, filename: str, lineno: int, file: Any = None,
                  line: Optional[str] = None) -> None:
    print(f"{PROG}: warning: {' '.join(str(message).split())}", file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    try:
        return HANDLERS[args.command](args)
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

