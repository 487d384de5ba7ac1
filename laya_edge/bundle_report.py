"""What a bundle holds, whether its files are intact, and how it would run on this machine,
without building a session.

Backs `python -m laya_edge inspect`: the manifest's summary, every variant with its export-time
verification figures, which listed files are missing (a stat each; nothing hashed), the execution
providers this onnxruntime offers, and the plan (device, variant, providers, reasons) an
`ONNXAgent` with the same `device`/`precision` would follow. And `python -m laya_edge verify`:
every byte of every file against the manifest's SHA-256, each problem named.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional

from .bundle_format import (CONFIG, MANIFEST, check_file, files_under, missing_files, read_manifest,
                            slower_than_fp32)
from .bundle_source import read_files, resolve

VERIFICATION_KEYS = ("passed", "skipped", "argmax_agreement", "max_abs_p", "p99_abs_p", "rows")


def describe_bundle(directory: Path, device: Optional[str] = None,
                    precision: Optional[str] = None) -> Dict[str, Any]:
    """The bundle's summary as a JSON-ready dict; ValueError for a directory that is no bundle."""
    import onnxruntime

    from .session import plan

    source = resolve(str(directory))
    manifest = source.manifest
    if manifest is None:
        raise ValueError(f"{str(directory)!r} has no {MANIFEST}: a checkpoint or a bare graph, "
                         "not a laya_edge bundle")
    config = json.loads((Path(directory) / CONFIG).read_text(encoding="utf-8"))
    graph = manifest.get("graph", {})
    available = onnxruntime.get_available_providers()
    chosen = plan(device, precision, available, source.variants,
                  shape_ranges=graph.get("shape_ranges"),
                  slower_than_fp32=slower_than_fp32(manifest))
    return {
        "bundle": str(directory),
        "format_version": manifest.get("format_version"),
        "created": manifest.get("created"),
        "source": {key: value for key, value in manifest.get("source", {}).items()
                   if key != "files"},
        "versions": manifest.get("versions", {}),
        "config": {key: config.get(key) for key in ("encoder", "max_len", "head_max_len",
                                                     "temperature")},
        "graph": {key: graph.get(key) for key in ("exporter", "opset", "external_data",
                                                   "shape_ranges")},
        "variants": {name: {"files": entry.get("files", []), "bytes": entry.get("bytes"),
                            "present": name in source.variants,
                            "optimisations": entry.get("optimisations", []),
                            "speedup_vs_fp32": (entry.get("speed") or {}).get("speedup"),
                            "verification": {key: (entry.get("verification") or {}).get(key)
                                             for key in VERIFICATION_KEYS}}
                     for name, entry in (manifest.get("variants") or {}).items()},
        "files_checked": {"listed": len(manifest.get("files") or {}),
                          "missing": missing_files(directory, manifest),
                          "hashes": "not checked: `laya-edge verify` checks them"},
        "providers_available": available,
        "would_run": {"device": chosen.device, "precision": chosen.precision,
                      "graph": Path(chosen.graph).name,
                      "providers": [p[0] if isinstance(p, tuple) else p
                                    for p in chosen.providers],
                      "reasons": chosen.reasons},
    }


def summary_lines(report: Dict[str, Any]) -> List[str]:
    """The report for a terminal."""
    source = report["source"]
    lines = [f"bundle     {report['bundle']} (format {report['format_version']}, "
             f"created {report['created']})",
             f"source     {source.get('repo') or source.get('path')}"
             + (f" [{source['subfolder']}]" if source.get("subfolder") else ""),
             f"encoder    {report['config']['encoder']}, max_len {report['config']['max_len']}, "
             f"head_max_len {report['config']['head_max_len']}",
             f"graph      {report['graph']['exporter']} exporter, opset {report['graph']['opset']}",
             "variants"]
    for name, entry in report["variants"].items():
        check = entry["verification"]
        verdict = ("verification skipped" if check.get("skipped") else
                   f"export check {'passed' if check.get('passed') else 'FAILED'}: agreement "
                   f"{check.get('argmax_agreement', 0):.4f}, max |dp| "
                   f"{check.get('max_abs_p', 0):.2e}")
        size = f"{entry['bytes'] / 1e6:.1f} MB" if entry.get("bytes") else "?"
        speed = (f", {entry['speedup_vs_fp32']:.2f}x fp32 at export"
                 if entry.get("speedup_vs_fp32") is not None else "")
        lines.append(f"  {name:<5} {size:>9}  {verdict}{speed}"
                     + ("" if entry["present"] else "  (file missing)"))
    files = report["files_checked"]
    lines.append(f"files      {files['listed']} listed, "
                 + (f"MISSING {', '.join(files['missing'])}" if files["missing"] else
                    "all present")
                 + f"; hashes {files['hashes']}")
    run = report["would_run"]
    lines += [f"providers  {', '.join(report['providers_available'])}",
              f"would run  {run['precision']} on {run['device']} ({', '.join(run['providers'])})"]
    lines += [f"           {reason}" for reason in run["reasons"]]
    return lines


def check_bundle(directory: Path) -> Dict[str, Any]:
    """Every file the manifest lists, and every file a load would read, hashed in full against
    the manifest (no digest records: every byte is read): `{"bundle", "ok", "files": {path:
    "ok" or the problem}, "problems", "unlisted"}`. Unlisted files nothing reads are reported,
    not failed."""
    report: Dict[str, Any] = {"bundle": str(directory), "ok": False, "files": {},
                              "problems": [], "unlisted": []}
    try:
        manifest = read_manifest(directory)
    except (ValueError, OSError) as exc:
        report["problems"].append(str(exc))
        return report
    if manifest is None:
        report["problems"].append(f"{str(directory)!r} has no {MANIFEST}: not a laya_edge bundle")
        return report
    listed = manifest.get("files") or {}
    needed = [*read_files(Path(directory), manifest),
              *(name for entry in (manifest.get("variants") or {}).values()
                for name in entry.get("files", []))]
    for relative in sorted({*listed, *needed}):
        try:
            check_file(directory, manifest, relative, records=False)
            report["files"][relative] = "ok"
        except (ValueError, OSError) as exc:
            report["files"][relative] = str(exc)
            report["problems"].append(str(exc))
    report["unlisted"] = [name for name in files_under(directory)
                          if name != MANIFEST and name not in report["files"]]
    report["ok"] = not report["problems"]
    return report


def check_lines(report: Dict[str, Any]) -> List[str]:
    """The `check_bundle` report for a terminal."""
    lines = [f"bundle     {report['bundle']}"]
    lines += [f"  {'ok' if state == 'ok' else 'FAILED':<7} {name}"
              for name, state in report["files"].items()]
    lines += [f"  unlisted {name} (not read by the runtime)" for name in report["unlisted"]]
    lines.append(f"verified: all {len(report['files'])} files match {MANIFEST}" if report["ok"]
                 else f"FAILED: {len(report['problems'])} problem(s)")
    return lines
