"""`ONNXAgent`: Laya answers from an exported bundle with onnxruntime, tokenizers and numpy.

`predict_batch` is the one inference path; `system_one`/`predict` and `predict_long` call it.
Per-call state lives in the call; the session, tokenizer and temperatures are shared read-only,
so one agent serves many threads.
"""
from __future__ import annotations

import copy
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from .bundle_format import (CONFIG, MANIFEST, MIN_MARKERS, TOKENIZER_DIR, builtin_bundle_dir,
                            check_config, sha256_file, slower_than_fp32)
from .bundle_source import resolve, verify
from .confidence import apply_gate, check_min_confidence
from .decode import Temperatures, act_probabilities, decode_state, empty_payload
from .device_run import run
from .controls import check_batch_size, check_lang, check_max_len, check_positions
from .encode import (Encoder, Row, collate, encode_rows, length_groups, question_heads,
                     state_room)
from .hooks import HookArg, HookRegistry, PredictContext, PredictHookArg
from .lifecycle import run_predict
from .questions import normalise, parse_questions, warn_unknown_keys
from .session import Plan, create_session, dual_install, plan, session_device
from .session_cache import Setting as CacheSetting
from .session_cache import cache_root
from .window_scan import (StartProbe, aggregate_windows, check_scan_budget, default_window,
                          window_batch_cap, window_budget, window_starts)

if TYPE_CHECKING:
    import numpy as np

DEFAULT_MAX_LEN = 512
DEFAULT_HEAD_MAX_LEN = 192


class ONNXAgent(HookRegistry):
    """A Laya decision model served from an ONNX bundle."""

    model_id: Optional[str] = None

    def __init__(self, model_id_or_path: str, onnx_path: Optional[str] = None,
                 subfolder: Optional[str] = None, revision: Optional[str] = None,
                 token: Optional[str] = None, expected_sha256: Optional[Dict[str, str]] = None,
                 hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                 on_predict_end: PredictHookArg = None, hooks_raise: bool = True,
                 hooks_concurrent: bool = True, hooks_timeout: Optional[float] = None,
                 lang_temperatures: Optional[Dict[str, Any]] = None,
                 device: Optional[str] = None, precision: Optional[str] = None,
                 providers: Optional[Sequence[Any]] = None,
                 provider_options: Optional[Sequence[Dict[str, Any]]] = None,
                 intra_op_threads: Optional[int] = None, session_cache: CacheSetting = None,
                 gpu_mem_limit: Optional[int] = None):
        """Load a bundle (or a checkpoint directory/hub repo plus `onnx_path`).

        Hook arguments are validated first; then the device and precision are chosen
        (`runtime_info()` says what and why) and every file about to be parsed is checked
        against the bundle manifest (and `expected_sha256`). `gpu_mem_limit` caps the bytes
        the CUDA arena takes, so several replicas can share one GPU (docs/devices.md).
        """
        self._configure_hooks(hooks, on_predict_start, on_predict_end, hooks_raise,
                              hooks_concurrent, hooks_timeout)
        session_cache_root = cache_root(session_cache)
        self.model_id = self.model_id_or_path = model_id_or_path
        self.subfolder = subfolder
        source = resolve(model_id_or_path, onnx_path, subfolder, revision, token)
        self.directory, self.manifest, self.revision = (source.directory, source.manifest,
                                                        source.revision)
        import onnxruntime

        fp32 = source.variants.get("fp32")
        self.plan = plan(device, precision, onnxruntime.get_available_providers(),
                         source.variants, source.graph_sha256(fp32) if fp32 else "",
                         (self.manifest or {}).get("graph", {}).get("shape_ranges"),
                         providers, provider_options, gpu_mem_limit=gpu_mem_limit,
                         slower_than_fp32=slower_than_fp32(self.manifest))
        self._variants = dict(source.variants)
        verify(source, self.plan.graph, expected_sha256)
        self._source_info = {
            "path": str(self.directory.resolve()), "revision": self.revision,
            "manifest_sha256": sha256_file(self.directory / MANIFEST) if self.manifest else None,
            "created": (self.manifest or {}).get("created")}
        with open(self.directory / CONFIG, encoding="utf-8") as handle:
            self.cfg = json.load(handle)
        check_config(self.cfg, model_id_or_path)
        self.max_len = int(self.cfg.get("max_len", DEFAULT_MAX_LEN))
        self.head_max_len = int(self.cfg.get("head_max_len", DEFAULT_HEAD_MAX_LEN))
        self.max_positions = (self.manifest or {}).get("graph", {}).get("max_positions")
        self.temperatures = Temperatures(self.cfg, lang_temperatures)
        self.encoder = Encoder.from_directory(self.directory / TOKENIZER_DIR)
        self.session, self.plan = self._open_session(
            intra_op_threads, session_cache_root, source.graph_sha256,
            lambda graph: verify(source, graph, expected_sha256))
        self.graph_path = self.plan.graph

    def _open_session(self, intra_op_threads: Optional[int], session_cache_root: Optional[Path],
                      digest: Callable[[Path], str], check: Callable[[Path], None]
                      ) -> Tuple[Any, Plan]:
        """What runs the graph and the plan it runs: an onnxruntime session here (a provider
        that fails hands over to the plan's fallback, whose graph `check` verifies first); a
        subclass may run it elsewhere (`laya_edge.serving.triton.TritonAgent`) behind the same
        `run`/`get_providers` surface."""
        return create_session(self.plan, intra_op_threads, session_cache_root, digest, check)

    @property
    def lang_temperatures(self) -> Dict[str, Dict[str, Any]]:
        """Per-language temperature overrides, keyed by base language (empty when none)."""
        return self.temperatures.lang_temperatures

    def source_info(self) -> Dict[str, Any]:
        """Where this agent's model came from: the bundle directory, the hub revision, and the
        manifest's SHA-256 and creation time (None for a checkpoint plus a graph, no manifest),
        so an answer can be traced to the exact bundle that gave it."""
        return dict(self._source_info)

    def runtime_info(self) -> Dict[str, Any]:
        """What this agent runs on and why: device (read back from the session's first active
        provider), precision, graph, active providers, and the model's `source_info`."""
        return {"source": self.source_info(), "device": session_device(self.session), "device_id": self.plan.device_id,
                "precision": self.plan.precision, "graph": str(self.graph_path),
                "providers": self.session.get_providers(),
                "available_variants": sorted(self._variants), "reasons": list(self.plan.reasons),
                "onnxruntime_dual_install": dual_install()}

    def __repr__(self) -> str:
        return f"ONNXAgent({self.model_id!r}, graph={str(self.graph_path)!r})"

    # -- inference -----------------------------------------------------------------------------

    def predict_batch(self, states: List[Any], questions: Dict[Any, Dict[str, Any]],
                      batch_size: Optional[int] = None, lang: Optional[str] = None,
                      hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                      hooks_timeout: Optional[float] = None, max_len: Optional[int] = None,
                      head_max_len: Optional[int] = None, sort_by_length: bool = False,
                      min_confidence: Any = None) -> List[Dict[str, Any]]:
        """Answer `questions` about every state; one result per state, in input order.

        States are answered in chunks of `batch_size` (default: all in one session run);
        `sort_by_length` groups states of similar length so less padding is computed.
        """
        gate = None if min_confidence is None else check_min_confidence(min_confidence)
        call = self._hook_call(hooks, on_predict_start, on_predict_end, hooks_raise,
                               hooks_timeout)
        ctx = PredictContext(states=states, questions=questions, model=self.model_id,
                             agent=self, max_len=max_len, head_max_len=head_max_len)

        def infer(ctx: PredictContext) -> List[Dict[str, Any]]:
            return self._infer(ctx.states, ctx.questions, lang, batch_size, sort_by_length,
                               ctx.max_len, ctx.head_max_len)

        return run_predict(call, ctx, infer, lambda results: apply_gate(results, gate))

    def system_one(self, state: Any, questions: Dict[Any, Dict[str, Any]],
                   lang: Optional[str] = None, hooks: HookArg = None,
                   on_predict_start: PredictHookArg = None, on_predict_end: PredictHookArg = None,
                   hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                   max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                   min_confidence: Any = None) -> Dict[str, Any]:
        """Answer `questions` about one state (`predict_batch([state], ...)[0]`)."""
        return self.predict_batch([state], questions, lang=lang, hooks=hooks,
                                  on_predict_start=on_predict_start,
                                  on_predict_end=on_predict_end, hooks_raise=hooks_raise,
                                  hooks_timeout=hooks_timeout, max_len=max_len,
                                  head_max_len=head_max_len, min_confidence=min_confidence)[0]

    predict = system_one

    def _infer(self, states: Any, questions: Any, lang: Optional[str],
               batch_size: Optional[int], sort_by_length: bool, max_len: Optional[int],
               head_max_len: Optional[int]) -> List[Dict[str, Any]]:
        """Validate what the start hooks left, then encode, run and decode chunk by chunk."""
        if isinstance(states, (str, bytes, dict)):
            raise TypeError("predict_batch expects a list of states; pass a single state to "
                            "predict()/system_one().")
        if not isinstance(questions, dict):
            raise TypeError("questions must be a dict of question id -> definition, got "
                            f"{type(questions).__name__}")
        states = list(states)
        if any(state is None for state in states):
            raise TypeError("state must not be None; pass a string, dict, or list")
        if not states:
            return []
        if not questions:
            return [empty_payload() for _ in states]
        max_len = self.max_len if max_len is None else check_max_len(max_len)
        head_max_len = self.head_max_len if head_max_len is None else head_max_len
        chunk, lang = check_batch_size(batch_size) or len(states), check_lang(lang)
        parsed = parse_questions(questions)
        warn_unknown_keys(questions)
        heads = question_heads(self.encoder, parsed, head_max_len)
        reorder = sort_by_length and 1 < chunk < len(states)
        window = chunk * 8 if reorder else chunk
        results: List[Dict[str, Any]] = []
        for start in range(0, len(states), window):
            part = states[start:start + window]
            encoded = encode_rows(self.encoder, part, parsed, heads, max_len, head_max_len)
            check_positions(max(len(row.ids) for rows in encoded for row in rows), max_len,
                            self.max_positions)
            order = list(range(len(part)))
            if reorder:
                order.sort(key=lambda i: max(len(row.ids) for row in encoded[i]))
            answered: List[Optional[Dict[str, Any]]] = [None] * len(part)
            for offset in range(0, len(order), chunk):
                indices = order[offset:offset + chunk]
                logits, act = self._run_rows([row for i in indices for row in encoded[i]])
                for position, i in enumerate(indices):
                    answered[i] = decode_state(logits, act, position * len(parsed), encoded[i],
                                               parsed, heads, self.temperatures, lang)
            results.extend(answered)
        return results

    def _run_rows(self, rows: List[Row]) -> Tuple[np.ndarray, np.ndarray]:
        """Logits and P(act) for `rows`, in their order, from session runs of similar length."""
        limits, binding = self.plan.limits, self.plan.binding
        width = max(MIN_MARKERS, max(len(row.markers) for row in rows))
        if limits.markers is not None and width > limits.markers:
            raise ValueError(f"a question has {width} options; this {self.plan.device} session "
                             f"takes at most {limits.markers} per row (the bundle's "
                             "shape_ranges.markers.max); ask with fewer options or re-export with "
                             "a larger range")
        groups = length_groups([len(row.ids) for row in rows], limits.tokens, limits.rows)
        if len(groups) == 1:
            logits, act_logits = run(self.session, collate(rows, self.encoder.pad.id),
                                     binding=binding)
            return logits, act_probabilities(act_logits)
        import numpy as np

        logits = np.zeros((len(rows), width), dtype=np.float32)
        act = np.zeros(len(rows), dtype=np.float32)
        for group in groups:
            part_logits, part_act = run(self.session,
                                        collate([rows[i] for i in group], self.encoder.pad.id),
                                        binding=binding)
            logits[group, :part_logits.shape[1]] = part_logits
            act[group] = act_probabilities(part_act)
        return logits, act

    # -- long states ---------------------------------------------------------------------------

    def _min_room(self, questions: Dict[Any, Any], max_len: int,
                  head_max_len: int) -> Optional[int]:
        try:
            normalised = [normalise(definition) for definition in questions.values()]
        except Exception:
            return None
        if not normalised:
            return None
        return min(state_room(self.encoder.head(q, head_max_len), max_len) for q in normalised)

    def predict_long(self, state: Any, questions: Dict[Any, Dict[str, Any]],
                     window: Optional[int] = None, stride: Optional[int] = None,
                     aggregate: str = "auto", batch_size: Optional[int] = None,
                     lang: Optional[str] = None, hooks: HookArg = None,
                     on_predict_start: PredictHookArg = None,
                     on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                     hooks_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Answer about a state longer than one sequence by scanning it in overlapping windows.

        Per question the deciding window wins (noul: the highest P(true); choice/score: the most
        confident window), and `answer["window"]` names its token span. The probability is that
        window's, not a calibrated document-level number.
        """
        if state is None:
            raise TypeError("state must not be None; pass a string, dict, or list")
        if not isinstance(questions, dict):
            raise TypeError("questions must be a dict of question id -> definition, got "
                            f"{type(questions).__name__}")
        if aggregate != "auto":
            raise ValueError("predict_long: only aggregate='auto' is supported")
        batch_size, lang = check_batch_size(batch_size), check_lang(lang)
        parsed = parse_questions(questions)
        max_len, head_max_len = self.max_len, self.head_max_len
        rooms = [state_room(self.encoder.head(q, head_max_len), max_len) for q in parsed.values()]
        size, step, room = window_budget(rooms, max_len, head_max_len, window, stride)
        asked = copy.deepcopy(questions)
        state_ids = self.encoder.state_ids([state])[0]
        probe = StartProbe()
        hook_args = dict(hooks=hooks, on_predict_end=on_predict_end, hooks_raise=hooks_raise,
                         hooks_timeout=hooks_timeout,
                         on_predict_start=_with_probe(on_predict_start, probe))

        if len(state_ids) <= (size if window and window > 0 else room):
            single = dict(self.system_one(state, questions, lang=lang, **hook_args))
            check_scan_budget(probe, max(size, len(state_ids)), max_len, head_max_len, asked,
                              self._min_room)
            single["usage"] = {**(single.get("usage") or {}),
                               "windows": 0 if probe.answered else 1}
            return single

        starts = window_starts(len(state_ids), size, step)
        windows = [self.encoder.decode(state_ids[i:i + size]) for i in starts]
        cap = window_batch_cap(len(windows), size, default_window(max_len, head_max_len),
                               batch_size)
        results = self.predict_batch(list(windows), questions, batch_size=cap, lang=lang,
                                     **hook_args)
        check_scan_budget(probe, size, max_len, head_max_len, asked, self._min_room)
        if probe.answered:
            if len(results) != 1:
                raise ValueError(f"predict_long: a start hook answered this state with "
                                 f"{len(results)} results; ctx.skip() takes one result for the "
                                 "document, not one per window")
            warnings.warn("laya: predict_long: a hook answered the state before it was scanned, "
                          "so no window decided the result and none is reported",
                          RuntimeWarning, stacklevel=2)
            document = dict(results[0])
            document["usage"] = dict(document.get("usage") or {}, windows=0)
            return document
        rewritten = probe.ran and probe.states != windows
        if len(results) != len(windows) and not rewritten:
            raise ValueError(f"predict_long: the state was split into {len(windows)} windows and "
                             f"the call returned {len(results)} results")
        if not results:
            warnings.warn("laya: predict_long: a start hook left no states to score, so the call "
                          "aggregated nothing and returns no answers", RuntimeWarning,
                          stacklevel=2)
            return dict(empty_payload(), usage={"input_tokens": 0, "output_tokens": 0,
                                                "windows": 0})
        question_types = probe.question_types
        if question_types is None:  # no hook chain ran (a replaced predict_batch)
            question_types = {qid: q.qtype for qid, q in parsed.items()}
        spans = None if rewritten else [(i, min(i + size, len(state_ids))) for i in starts]
        return aggregate_windows(results, question_types, asked,
                                 probe.question_types is not None, spans)


def _with_probe(on_predict_start: PredictHookArg, probe: StartProbe) -> List[Any]:
    """The caller's start callables with the probe last, so it sees what inference will see."""
    if on_predict_start is None:
        return [probe]
    if isinstance(on_predict_start, (list, tuple)):
        return [*on_predict_start, probe]
    return [on_predict_start, probe]


Agent = ONNXAgent


TORCH_ONLY_OPTIONS = ("fast", "compile")


def load(model_id_or_path: str = "english", backend: Optional[str] = None,
         **kwargs: Any) -> ONNXAgent:
    """An `ONNXAgent`: the drop-in for upstream's `laya.load`.

    A checkpoint name or alias (`"english"`, `"ml"`, `"typed-decisions"`) means that published
    checkpoint's exported bundle in `$LAYA_EDGE_MODELS/<name>`; anything else is a bundle
    directory or hub repo. `backend` may be None, "auto" or "onnx": laya_edge has no torch
    backends, and says so rather than silently running something else.
    """
    if backend not in (None, "auto", "onnx"):
        raise ValueError(f"backend={backend!r} runs on torch; laya_edge only runs exported ONNX "
                         "bundles (backend='onnx'). Use upstream laya for torch backends.")
    refused = [name for name in TORCH_ONLY_OPTIONS if kwargs.pop(name, False)]
    if refused:
        raise ValueError(f"{', '.join(refused)}=True selects a torch backend; laya_edge only runs "
                         "exported ONNX bundles")
    if kwargs.get("subfolder") is None and not os.path.exists(model_id_or_path):
        from .model_names import canonical_name, resolve_model_spec

        if resolve_model_spec(model_id_or_path) is not None:
            model_id_or_path = str(builtin_bundle_dir(canonical_name(model_id_or_path)))
    return ONNXAgent(model_id_or_path, **kwargs)
