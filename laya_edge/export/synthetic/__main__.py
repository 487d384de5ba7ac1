"""`python -m laya_edge.export.synthetic`: write synthetic Laya checkpoints from the command
line (the kinds are described in this package's docstring)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

from . import KINDS, SMALL_KINDS, __doc__ as PACKAGE_DOC, check_checkpoint, make_checkpoint
from ..logs import progress_on_stderr
from .writing import LOGGER, log


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=PACKAGE_DOC.split("\n\n")[0],
        epilog="Kinds: %s. --all writes %s into DIR/<kind>/. See the module docstring for what "
               "each kind contains." % (", ".join(KINDS), ", ".join(SMALL_KINDS)),
    )
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--kind", choices=KINDS, help="checkpoint kind to write (needs --out)")
    target.add_argument("--all", metavar="DIR", type=Path,
                        help="write every small kind (%s) into DIR/<kind>/" % ", ".join(SMALL_KINDS))
    parser.add_argument("--out", metavar="DIR", type=Path, help="output directory for --kind")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    clamp = parser.add_mutually_exclusive_group()
    clamp.add_argument("--clamp-test", dest="clamp_test", action="store_true", default=None,
                       help="ship a temperature_by_options value outside [0.5, 5] (choice:11+ = "
                            "0.1006) so loaders must clamp and warn; default for modernbert-tiny "
                            "and modernbert-base, ignored by the other kinds")
    clamp.add_argument("--no-clamp-test", dest="clamp_test", action="store_false",
                       help="keep every temperature inside [0.5, 5] (choice:11+ = 0.75)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing checkpoint in the output directory")
    parser.add_argument("--check", action="store_true",
                        help="afterwards load each checkpoint with upstream laya.load and answer "
                             "a choice, a noul and a score question")
    args = parser.parse_args(argv)
    if args.kind and args.out is None:
        parser.error("--kind needs --out DIR")
    if args.all is not None and args.out is not None:
        parser.error("--out cannot be combined with --all")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    with progress_on_stderr(LOGGER, "make_checkpoint"):
        return _write(args)


def _write(args: argparse.Namespace) -> int:
    jobs = ([(args.kind, args.out)] if args.kind
            else [(kind, args.all / kind) for kind in SMALL_KINDS])
    for kind, out in jobs:
        make_checkpoint(kind, out, seed=args.seed, clamp_test=args.clamp_test, force=args.force)
    if args.check:
        for kind, out in jobs:
            started = time.perf_counter()
            answers = check_checkpoint(out)
            log("%s: laya.load + system_one OK in %.1fs: %s"
                % (kind, time.perf_counter() - started, json.dumps(answers, ensure_ascii=False)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
