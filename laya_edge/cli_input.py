"""Reading the command line's inputs (JSON, the state in any encoding), or an InputError naming one.

Undecodable bytes are refused in the command line's own words (which option fixes it), never as
Python's `UnicodeDecodeError` or the API's advice to decode the source bytes differently.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """Bad input from the command line: exit code 2."""


def decode(raw: bytes, what: str, encoding: str, errors: str, fix: str) -> str:
    """`raw` as text; undecodable bytes are an InputError naming `what`, the byte, and `fix`."""
    try:
        return raw.decode(encoding, errors)
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} is not valid {encoding} text (byte "
                         f"{exc.object[exc.start]:#04x} at position {exc.start}); {fix}") from None


def argument_text(text: str, what: str, errors: str, fix: str) -> str:
    """Text from the command line itself: the shell's bytes Python could not decode arrive as
    lone surrogates (PEP 383), so they are decoded again here, in the command line's words."""
    encoding = sys.getfilesystemencoding()
    return decode(os.fsencode(text), what, encoding, errors, fix)


def parse_json(text: str, argument: str, what: str) -> Any:
    """JSON text (a leading byte-order mark, as Windows editors write, is allowed)."""
    try:
        return json.loads(text[1:] if text.startswith("\ufeff") else text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what}: invalid JSON in {argument!r} (line {exc.lineno}, column "
                         f"{exc.colno}: {exc.msg})") from None


def read_file(argument: str, what: str) -> bytes:
    """The bytes of the file `argument` names; a missing or unreadable one is bad input."""
    path = Path(argument)
    if not path.is_file():
        raise InputError(f"{what}: no such file {argument!r}")
    try:
        return path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what}: cannot read {argument!r} ({exc.strerror or exc})") from None


def read_json(argument: str, what: str) -> Any:
    """JSON from a file path, or inline JSON text (an argument starting with `{` or `[`).
    JSON is UTF-8 text (RFC 8259)."""
    fix = "JSON must be UTF-8: save it as UTF-8"
    if argument.lstrip().startswith(("{", "[")):
        text = argument_text(argument, what, "strict", fix)
    else:
        text = decode(read_file(argument, what), f"{what} {argument!r}", "utf-8", "strict", fix)
    return parse_json(text, argument, what)


def read_state(args: argparse.Namespace) -> Any:
    """The state from --state, --state-file (parsed when it ends in .json) or stdin, decoded
    with --encoding and --errors."""
    fix = (f"pass --encoding with its encoding (it was read as {args.encoding}), or --errors "
           "replace to replace the bytes that do not decode")
    if args.state is not None:
        return argument_text(args.state, "--state", args.errors,
                             "pass --errors replace, or the text in a --state-file with "
                             "--encoding")
    if args.state_file is not None:
        text = decode(read_file(args.state_file, "--state-file"),
                      f"--state-file {args.state_file!r}", args.encoding, args.errors, fix)
        if Path(args.state_file).suffix.lower() == ".json":
            return parse_json(text, args.state_file, "--state-file")
        return text
    if sys.stdin is None or sys.stdin.isatty():
        raise InputError("no state: pass --state TEXT, --state-file FILE, or pipe it on stdin")
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream put in place of stdin by a caller: already decoded
        return sys.stdin.read()
    return decode(stream.read(), "standard input", args.encoding, args.errors, fix)
