"""The command line's grammar: commands, options, and the checks that make bad values usage errors.

A value argparse refuses (an unknown device or precision, a port out of range, a limit below one,
an unknown encoding) exits 2 with argparse's usage message naming the option, before anything is
read or loaded; `laya_edge.cli` runs what the parsed arguments ask for.
"""
from __future__ import annotations

import argparse
import math
from typing import Callable, NoReturn

from . import __version__

PROG = "laya-edge"
DEVICE_CHOICES = "auto, cpu, cuda, cuda:N, tensorrt, tensorrt:N"


class Parser(argparse.ArgumentParser):
    """argparse, with its error message kept on one line: an argument holding a line break or
    other control character (a script's variable) has it escaped, as `repr` would."""

    def error(self, message: str) -> NoReturn:
        super().error("".join(char if char.isprintable() else repr(char)[1:-1]
                              for char in message))


def device(value: str) -> str:
    """`--device`: what `ONNXAgent(device=...)` takes."""
    from .session import parse_device

    try:
        parse_device(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid device {value!r} (choose from "
                                         f"{DEVICE_CHOICES})") from None
    return value


def whole_number(low: int, high: float = math.inf) -> Callable[[str], int]:
    """An argparse type: a whole number in `[low, high]`."""
    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            bounds = f"from {low} to {high}" if high != math.inf else f"of {low} or more"
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number {bounds}")
        return number
    return parse


def share(value: str) -> float:
    """A finite number of 0 or more: `--num-cpus` / `--num-gpus` (Ray takes fractions), the
    service's waits and timeouts."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not (math.isfinite(number) and number >= 0):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of 0 or more")
    return number


def encoding(value: str) -> str:
    """`--encoding`: a codec Python knows."""
    import codecs

    try:
        return codecs.lookup(value).name
    except LookupError:
        raise argparse.ArgumentTypeError(f"unknown encoding {value!r} (e.g. utf-8, latin-1, "
                                         "cp1252, utf-16)") from None


def build_parser(description: str) -> argparse.ArgumentParser:
    """Every command and option; the command's name is `args.command`."""
    parser = Parser(prog=PROG, description=description)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _predict(commands.add_parser("predict", help="answer questions about one state"))

    route = commands.add_parser("route", help="which checkpoint a text goes to, and why "
                                               "(loads no model)")
    route.add_argument("text")
    route.add_argument("--lang", help="a language code the caller already knows")
    route.add_argument("--model", help="router config .json (default: the built-in checkpoints)")
    _json_option(route)

    inspect = commands.add_parser("inspect", help="a bundle's manifest, variants and how it "
                                                  "would run here (hashes nothing)")
    inspect.add_argument("bundle")
    _device_options(inspect)
    _json_option(inspect)

    verify = commands.add_parser("verify", help="hash every file of a bundle against its "
                                                "manifest; exit 1 naming each problem")
    verify.add_argument("bundle")
    _json_option(verify)

    demo = commands.add_parser("demo", help="the shipped demo model on a few support tickets: "
                                            "routing, hooks, answers, timings (no network)")
    demo.add_argument("--models", help="a folder with demo.json and its bundles (default: the "
                                       "checkout's models/)")
    demo.add_argument("--json", action="store_true", help="one JSON document instead of prose")
    _serve(commands.add_parser("serve", help="an HTTP service speaking upstream's POST "
                                             "/v1/systemone (extra: laya-edge[serve])"))
    return parser


def _predict(predict: argparse.ArgumentParser) -> None:
    predict.add_argument("--model", required=True,
                         help="bundle directory, or a router config .json ({\"models\": ...})")
    source = predict.add_mutually_exclusive_group()
    source.add_argument("--state", help="the state as text")
    source.add_argument("--state-file", help="read the state from a file (.json is parsed)")
    predict.add_argument("--encoding", type=encoding, default="utf-8",
                         help="how --state-file or standard input is encoded (default utf-8)")
    predict.add_argument("--errors", choices=("strict", "replace"), default="strict",
                         help="bytes the encoding cannot decode: strict refuses the state "
                              "(default), replace puts U+FFFD in their place")
    predict.add_argument("--questions", required=True,
                         help="questions: a JSON file, or inline JSON")
    _device_options(predict)
    _json_option(predict)


def _serve(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=whole_number(1, 65535), default=8000)
    serve.add_argument("--model", help="bundle directory, or a router config .json "
                                       "(default: the built-in checkpoints)")
    _device_options(serve)
    serve.add_argument("--hooks", action="append", default=[], metavar="MODULE:ATTRIBUTE",
                       help="install a hook object on the Router (repeatable)")
    serve.add_argument("--preload", action="store_true",
                       help="load the English and multilingual checkpoints in the background "
                            "at startup; /health/ready is 503 until both are loaded")
    serve.add_argument("--max-body-bytes", type=whole_number(1), default=1 << 20)
    serve.add_argument("--max-questions", type=whole_number(1), default=64)
    serve.add_argument("--max-concurrent", type=whole_number(1),
                       help="Router calls at once, each answering up to --max-batch requests; "
                            "more wait in the queue (default: 1 on a CPU, 4 on a GPU)")
    serve.add_argument("--max-queue", type=whole_number(0), default=64,
                       help="requests that may wait for a slot; beyond, 503 with Retry-After "
                            "(default 64)")
    serve.add_argument("--queue-timeout-s", type=share, default=10.0,
                       help="how long a request may wait for a slot before a 503 (default 10)")
    serve.add_argument("--max-batch", type=whole_number(1),
                       help="single requests with the same questions and controls answered in "
                            "one batch, at most this many (1: off; default: 1 on a CPU, 16 on a "
                            "GPU, docs/serving.md)")
    serve.add_argument("--max-wait-ms", type=share, default=5.0,
                       help="how long a batch waits for more requests (default 5)")
    serve.add_argument("--drain-timeout-s", type=share, default=30.0,
                       help="on SIGTERM, how long to finish accepted requests before exiting "
                            "(default 30)")
    serve.add_argument("--engine", choices=("uvicorn", "ray"), default="uvicorn",
                       help="uvicorn: one process (default); ray: Ray Serve replicas with "
                            "request batching (extra: laya-edge[ray])")
    serve.add_argument("--replicas", type=whole_number(1), default=1,
                       help="--engine ray: replicas")
    serve.add_argument("--num-cpus", type=share, default=1.0,
                       help="--engine ray: CPUs per replica")
    serve.add_argument("--num-gpus", type=share, default=0.0,
                       help="--engine ray: GPUs per replica")
    serve.add_argument("--ray-address", help="--engine ray: an existing cluster (default: "
                                             "start a local Ray instance)")
    serve.add_argument("--log-level", default="info",
                       choices=("critical", "error", "warning", "info", "debug"))


def _device_options(parser: argparse.ArgumentParser) -> None:
    from .session import PRECISIONS

    parser.add_argument("--device", type=device, help=f"{DEVICE_CHOICES} (default auto)")
    parser.add_argument("--precision", type=str.lower, choices=PRECISIONS,
                        help="auto (default), fp32, fp16, int8")


def _json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="JSON even on a terminal")
