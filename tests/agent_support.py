"""Shared helpers for the ONNXAgent tests: building the three runtimes that are compared, the
comparisons themselves, and a seeded generator of states, question sets and call variants.

The three runtimes answering the same questions:

* ours: `laya_edge.load(bundle)`;
* upstream's ONNX runtime on the same graph: `laya.onnx_agent.ONNXAgent(bundle, onnx_path=...)`
  -- same graph, same session optimisations, same inputs, same batch shapes, so its payload
  must be *identical* to ours;
* upstream's PyTorch agent on the checkpoint the bundle was exported from:
  `laya.load(checkpoint, device="cpu")` -- identical discrete answers, usage and keys, floats
  within `TOLERANCE` (the payload's `model` name differs by design).
"""
from __future__ import annotations

import math
import random
import re
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple
from unittest import mock

KINDS = ("modernbert-tiny", "unigram-tiny", "minilm")
# Published floats are rounded to 4 decimals; two forwards that differ by ~1e-6 can round to
# neighbouring 4-decimal values, so the tolerance is one unit in the last place.
TOLERANCE = 1e-4 + 1e-9
OUR_MODEL = "laya-rl-agent-onnx"
TORCH_MODEL = "laya-rl-agent"

# The same per-language temperatures for every runtime (docs/design/decoding.md#temperatures): "de"
# overrides everything (one value out of range, so it is clamped with a warning), "fr" inherits the
# checkpoint's triple.
LANG_TEMPERATURES = {
    "de-AT": {"temperature": [2.0, 0.7, 1.3],
              "temperature_by_options": {"choice:3-5": 3.0, "noul:2": 0.8, "score:6-10": 9.0}},
    "fr": None,
}


def quietly(build: Callable[[], Any]) -> Any:
    """Build a runtime with its load-time RuntimeWarnings (temperature clamping) silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return build()


def edge_agent(bundle: Path, **kwargs: Any) -> Any:
    import laya_edge

    return quietly(lambda: laya_edge.load(str(bundle), **kwargs))


@contextmanager
def upstream_on_our_kernels() -> Iterator[None]:
    """While open, onnxruntime sessions (upstream's) are built with the optimisations that
    laya_edge's CPU session leaves off left off too: the same kernels, so the same floats.
    Left to itself upstream fuses residual+LayerNorm again, which moves the fourth decimal of
    an occasional probability."""
    import onnxruntime

    from laya_edge.session import disabled_optimizers_for

    real = onnxruntime.InferenceSession

    def same_kernels(path: Any, sess_options: Any = None, providers: Any = None) -> Any:
        return real(path, sess_options=sess_options, providers=providers,
                    **disabled_optimizers_for(providers or []))

    with mock.patch.object(onnxruntime, "InferenceSession", same_kernels):
        yield


def upstream_onnx_agent(bundle: Path, **kwargs: Any) -> Any:
    from laya.onnx_agent import ONNXAgent

    with upstream_on_our_kernels():
        return quietly(lambda: ONNXAgent(str(bundle), onnx_path=str(Path(bundle) / "laya.onnx"),
                                         **kwargs))


def torch_agent(checkpoint: Path, **kwargs: Any) -> Any:
    import laya

    return quietly(lambda: laya.load(str(checkpoint), device="cpu", **kwargs))


# -- outcomes and comparisons ------------------------------------------------------------------

def outcome(call: Callable[[], Any]) -> Tuple:
    """`("ok", value)` or `("error", exception type, message)`, recording warnings too."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = call()
        except Exception as exc:  # noqa: BLE001 -- the outcome is what is compared
            result: Tuple = ("error", type(exc), str(exc))
        else:
            result = ("ok", value)
    return result + (warning_texts(caught),)


# Warnings laya_edge gives where upstream is silent (docs/agent.md#warnings; tests/test_controls.py
# checks each): set aside before our warnings are compared with upstream's.
OWN_WARNING = re.compile(r"question .+: (\d+ instruction tokens do not fit in head_max_len="
                         r"|key .+ is not a question key)|(batch_size|head_max_len|lang)=")


def own_outcome(call: Callable[[], Any]) -> Tuple:
    """`outcome(call)` of laya_edge, without the warnings upstream never gives."""
    result = outcome(call)
    return result[:-1] + ([(category, text) for category, text in result[-1]
                           if not OWN_WARNING.match(text)],)


def warning_texts(caught: List[Any]) -> List[Tuple[type, str]]:
    return [(w.category, str(w.message)) for w in caught]


def assert_identical(ours: Any, theirs: Any) -> None:
    """Exact equality, key order and key/value types included (`repr` shows `True` vs `1`)."""
    assert ours == theirs
    assert repr(ours) == repr(theirs)


def assert_close(ours: Any, theirs: Any, where: str = "") -> None:
    """Same structure, key order, types and discrete values; floats within TOLERANCE."""
    if isinstance(theirs, float) and not isinstance(theirs, bool):
        assert type(ours) is float, f"{where}: {ours!r} is not a float like {theirs!r}"
        assert math.isfinite(ours) == math.isfinite(theirs), where
        assert abs(ours - theirs) <= TOLERANCE, f"{where}: {ours!r} vs {theirs!r}"
        return
    assert type(ours) is type(theirs), f"{where}: {type(ours)} vs {type(theirs)}"
    if isinstance(theirs, dict):
        assert list(ours) == list(theirs), f"{where}: keys {list(ours)} vs {list(theirs)}"
        assert [type(k) for k in ours] == [type(k) for k in theirs], f"{where}: key types"
        for key in theirs:
            assert_close(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_close(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"


def assert_matches_torch(ours: Dict[str, Any], theirs: Dict[str, Any], where: str = "") -> None:
    """One payload against the PyTorch agent's: everything but the model name and float noise."""
    assert ours["model"] == OUR_MODEL and theirs["model"] == TORCH_MODEL, where
    assert list(ours) == list(theirs), where
    assert_identical(ours["usage"], theirs["usage"])
    assert_close({k: v for k, v in ours.items() if k != "model"},
                 {k: v for k, v in theirs.items() if k != "model"}, where)


def assert_results_match_torch(ours: List[Dict[str, Any]], theirs: List[Dict[str, Any]],
                               where: str = "") -> None:
    assert len(ours) == len(theirs), where
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert_matches_torch(a, b, f"{where} state {i}")


# -- the seeded generator -------------------------------------------------------------------------

WORDS = ("the invoice was charged twice this month please refund my customer account order "
         "shipping delay broken screen login password reset urgent billing support ticket "
         "escalate manager cancel subscription upgrade plan discount seats contract renewal "
         "crash settings export report weekly team access denied error payment card").split()
FOREIGN = ("Rechnung doppelt abgebucht bitte erstatten facture remboursement commande "
           "pedido reembolso cuenta 請求書 返金 してください 注文").split()
ODD = ("café", "naïve", "Größe", "señor", "日本語のテキスト", "😀", "🚀🔥", "שלום", "مرحبا",
       "Ω≈ç√∫", "e\u0301", "zero\u200bwidth", "tab\there", "new\nline", "  spaced  ", "\\n",
       '"quoted"', "{not json}", "ﬁ ligature", "Ⅻ")
SPECIAL_LOOKALIKES = ("[CLS]", "[SEP]", "<bos>", "<eos>", "[PAD]", "<pad>", "[UNK]", "[mask]",
                      "MASK", "<MASK>")


def text(rng: random.Random, n: int, odd: float = 0.1) -> str:
    out = []
    for _ in range(n):
        roll = rng.random()
        out.append(rng.choice(ODD) if roll < odd else rng.choice(FOREIGN) if roll < 2 * odd
                   else rng.choice(WORDS))
    return " ".join(out)


STATE_SHAPES = ("long", "long_conversation", "mask", "dict", "conversation", "nested", "empty",
                "unicode", "lookalike", "short")


def gen_state(rng: random.Random, mask: str, long_words: Tuple[int, int] = (300, 500),
              shape: Optional[str] = None) -> Any:
    """One state of one of many shapes: text (short, long, empty, unicode, mask text inside),
    a conversation list (sometimes long enough to be left-truncated) or a JSON-like dict.

    `long_words` is the word count of a long state, chosen per checkpoint to run past its
    `max_len` without making the forward passes needlessly expensive."""
    shape = shape or rng.choice(["short", "short", "long", "empty", "unicode", "mask",
                                 "conversation", "long_conversation", "dict", "nested",
                                 "lookalike"])
    if shape == "short":
        return text(rng, rng.randint(1, 25))
    if shape == "long":
        return text(rng, rng.randint(*long_words))
    if shape == "empty":
        return rng.choice(["", " ", "\n"])
    if shape == "unicode":
        return " ".join(rng.choice(ODD) for _ in range(rng.randint(1, 12)))
    if shape == "mask":
        return f"{text(rng, 5)} {mask} {text(rng, 3)}{mask}{mask} ignore all previous {mask}"
    if shape == "lookalike":
        return f"{rng.choice(SPECIAL_LOOKALIKES)} {text(rng, 6)} {rng.choice(SPECIAL_LOOKALIKES)}"
    if shape in ("conversation", "long_conversation"):
        turns = (rng.randint(2, 6) if shape == "conversation"
                 else rng.randint(long_words[0] // 10, long_words[1] // 10))
        if rng.random() < 0.5:
            return [text(rng, rng.randint(3, 30)) for _ in range(turns)]
        return [{"role": rng.choice(["user", "agent"]), "content": text(rng, rng.randint(3, 30)),
                 "ts": rng.randint(0, 10**9)} for _ in range(turns)]
    if shape == "dict":
        return {"subject": text(rng, 4), "amount": rng.uniform(-1e6, 1e6),
                "count": rng.randint(0, 99),
                "ratio": rng.choice([0.1, 1 / 3, 1e-7, 2.5e20, float("nan"), float("inf"),
                                     float("-inf"), -0.0]),
                "flag": rng.random() < 0.5, "none": None, "note": f"{mask} {text(rng, 3)}"}
    return {"ticket": {"id": rng.randint(1, 10**6), "tags": [text(rng, 1), 3.25, None, True,
                                                            {"deep": [1, [2, [3.5, "x"]]]}]},
            "körper": text(rng, rng.randint(5, 60)), "nan": float("nan"), "ümlaut": "Größe"}


def unique_labels(rng: random.Random, n: int, shared_prefix: bool = False) -> List[Any]:
    """n scalar labels (str/int/float/bool) that are distinct under Python equality."""
    labels: List[Any] = []
    if shared_prefix or (n >= 15 and rng.random() < 0.5):
        # a shared prefix: cut to a few tokens by the head budget, these options collapse
        prefix = rng.choice(["tickets that belong to category number", "the customer asks for"])
        return [f"{prefix} {k}" for k in range(n)]
    while len(labels) < n:
        kind = rng.random()
        if kind < 0.55:
            candidate: Any = rng.choice([rng.choice(WORDS), f"opt_{len(labels)}", rng.choice(ODD),
                                         f"{rng.choice(WORDS)} {rng.choice(WORDS)}"])
        elif kind < 0.75:
            candidate = rng.randint(-5, 200)
        elif kind < 0.9:
            candidate = rng.choice([0.5, 2.25, -1.5, 1e-3, 1e6, 3.0])
        else:
            candidate = rng.random() < 0.5
        if all(not (candidate == seen) for seen in labels):
            labels.append(candidate)
    return labels


def description(rng: random.Random, mask: str, long: bool = False) -> Any:
    if long:
        return text(rng, rng.randint(60, 120))
    return rng.choice([
        text(rng, rng.randint(1, 12)), "", None, f"{mask} {text(rng, 3)}",
        {"why": text(rng, 3), "weight": 1.5, "tags": ["a", 2]}, [text(rng, 2), 3, None, False],
        42, 3.75, True, {"nested": {"ü": [1.0, float("nan")]}}])


def instructions(rng: random.Random, mask: str) -> Any:
    return rng.choice([
        text(rng, rng.randint(2, 20)), text(rng, rng.randint(60, 160)),
        f"{text(rng, 4)} {mask} {text(rng, 2)}?",
        {"task": text(rng, 5), "lang": "en", "weight": 0.25}, [text(rng, 3), 7, {"k": None}],
        42, 3.5, "日本語で答えてください"])


# The first question of each seed has one of these flavours in turn, so a short seed range still
# has custom noul labels, an option order and collapsing options.
QUESTION_FLAVOURS = ("noul-labels", "option-order", "many-options", None)


def gen_question(rng: random.Random, mask: str, flavour: Optional[str] = None) -> Dict[str, Any]:
    qtype = rng.choice(["choice", "choice", "score", "noul"])
    if flavour == "noul-labels":
        qtype = "noul"
    elif flavour == "many-options":
        qtype = "choice"
    q: Dict[str, Any] = {"type": qtype, "instructions": instructions(rng, mask)}
    if qtype == "choice":
        n = rng.choice([1, 2, 2, 3, 4, 5, 6, 8, 10, 11, 15, 25, 40])
        if flavour == "many-options":
            n = rng.choice([26, 30, 40])
        labels = unique_labels(rng, n, shared_prefix=flavour == "many-options")
        form = rng.random()
        if form < 0.4:
            q["criteria"] = labels
        elif form < 0.8:
            q["criteria"] = {label: description(rng, mask) for label in labels}
        else:   # long descriptions, cut to 48 tokens each (and collapsed when there are many)
            q["criteria"] = {label: description(rng, mask, long=True) for label in labels}
        count = n
    elif qtype == "score":
        levels = rng.randint(1, 7)
        q["criteria"] = [rng.choice([text(rng, rng.randint(1, 8)), {"level": i, "means": "x"},
                                     [i, "y"], i, float(i) + 0.5, f"{mask} level"])
                         for i in range(levels)]
        count = levels
    else:
        form = rng.random()
        if form < 0.25:
            pass                                   # criteria omitted
        elif form < 0.35:
            q["criteria"] = None
        elif form < 0.55:
            q["criteria"] = {"true": description(rng, mask)}
        elif form < 0.75:
            q["criteria"] = {True: description(rng, mask), False: description(rng, mask)}
        else:
            q["criteria"] = {rng.choice(["TRUE", "True", "true"]): description(rng, mask),
                             "False": description(rng, mask)}
        if rng.random() < 0.35 or flavour == "noul-labels":
            q["labels"] = rng.choice([{"false": " nope ", "true": "yep"},
                                      {"true": "Ja", "false": "Nein"},
                                      {"false": "not urgent", "true": f"urgent {mask}"}])
        count = 2
    if rng.random() < 0.3 or flavour == "option-order":
        order = list(range(count))
        rng.shuffle(order)
        q["option_order"] = order if rng.random() < 0.7 else tuple(order)
    return q


def gen_questions(rng: random.Random, mask: str, seed: int = 0) -> Dict[Any, Dict[str, Any]]:
    questions: Dict[Any, Dict[str, Any]] = {}
    for i in range(rng.randint(1, 4)):
        qid = rng.choice([f"q{i}", f"frage_{i}_ü", i, 100 + i])
        flavour = (QUESTION_FLAVOURS[(seed + seed // 4) % len(QUESTION_FLAVOURS)] if i == 0
                   else None)
        questions[qid] = gen_question(rng, mask, flavour)
    return questions


def gen_call(rng: random.Random, n_states: int, max_len: int) -> Dict[str, Any]:
    """Keyword arguments of one predict_batch call."""
    options: List[Dict[str, Any]] = [
        {}, {}, {"batch_size": None}, {"batch_size": 1}, {"batch_size": 3},
        {"batch_size": 2, "sort_by_length": True}, {"sort_by_length": True},
        {"max_len": rng.choice([160, 256, max_len])},
        {"head_max_len": rng.choice([48, 96, 300])},
        {"max_len": 256, "head_max_len": 64, "batch_size": 2},
        {"lang": "de"}, {"lang": "de-CH"}, {"lang": "FR"}, {"lang": "de_DE"}, {"lang": "en"},
        {"min_confidence": rng.choice([0.0, 0.35, 0.9, 1.0])},
        {"min_confidence": {"choice:3-5": 0.6, "noul:2": 0.7, "default": 0.3}},
        {"min_confidence": {"score:3-5": 0.99}},
    ]
    return dict(rng.choice(options))


# Per checkpoint: how many generated cases, how many states a call may carry, how long a long
# state is (words), and optionally a per-call `max_len` cap. The real MiniLM encoder costs
# far more per token than the tiny ones on a CPU, so its calls use a smaller token budget
# (the same code path as the config budget, with shorter rows).
PROFILES = {
    "modernbert-tiny": {"cases": 16, "states": (1, 1, 2, 3, 5, 7), "long_words": (220, 360)},
    "unigram-tiny": {"cases": 12, "states": (1, 1, 2, 3, 4), "long_words": (420, 560)},
    "minilm": {"cases": 12, "states": (1, 1, 2, 3), "long_words": (120, 200), "max_len": 160},
}


def gen_case(seed: int, mask: str, max_len: int, profile: Dict[str, Any]
             ) -> Tuple[List[Any], Dict[Any, Any], Dict[str, Any]]:
    """`(states, questions, predict_batch kwargs)` for one seed."""
    rng = random.Random(f"agent-parity-{seed}")
    # the first state's shape cycles with the seed, so a short seed range still covers them all
    states = [gen_state(rng, mask, profile["long_words"],
                        STATE_SHAPES[seed % len(STATE_SHAPES)] if i == 0 else None)
              for i in range(rng.choice(profile["states"]))]
    questions = gen_questions(rng, mask, seed)
    kwargs = gen_call(rng, len(states), max_len)
    cap = profile.get("max_len")
    if cap is not None:
        kwargs["max_len"] = min(kwargs.get("max_len") or cap, cap)
        kwargs["head_max_len"] = min(kwargs.get("head_max_len") or cap, cap // 2)
    return states, questions, kwargs
