"""The generated probe set an export is verified on.

Each case is a batch the runtime could really send: the three question types, 1 to 40 options,
states from a few words to past the token budget (so past any local-attention window), rows of
very different lengths padded together, and conversation-list and JSON states. Deterministic
for a seed, so a report can be reproduced.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, NamedTuple

WORDS = ("refund invoice charged twice account password reset login error crash screen slow "
         "order shipping delayed damaged package cancel subscription upgrade plan discount "
         "customer support agent urgent please help today tomorrow week month again still "
         "broken payment card bank transfer receipt email phone address delivery warehouse "
         "manager escalate complaint happy angry thanks sorry issue ticket update version "
         "android iphone browser settings profile notification data export import report").split()
TOPICS = ("billing", "technical", "sales", "shipping", "account", "legal", "feedback",
          "security", "returns", "partnerships")


class ProbeCase(NamedTuple):
    name: str
    states: List[Any]
    questions: Dict[str, Dict[str, Any]]


def _text(rng: random.Random, words: int) -> str:
    sentence, out = [], []
    for _ in range(words):
        sentence.append(rng.choice(WORDS))
        if len(sentence) >= rng.randint(6, 14):
            out.append(" ".join(sentence).capitalize() + rng.choice(".!?"))
            sentence = []
    if sentence:
        out.append(" ".join(sentence).capitalize() + ".")
    return " ".join(out)


def _choice(rng: random.Random, options: int, as_dict: bool) -> Dict[str, Any]:
    labels = [f"{TOPICS[i % len(TOPICS)]}_{i}" for i in range(options)]
    criteria: Any = ({label: _text(rng, rng.randint(2, 9)) for label in labels} if as_dict
                     else labels)
    return {"type": "choice", "instructions": f"Which of {options} options fits best?",
            "criteria": criteria}


def _score(rng: random.Random, levels: int) -> Dict[str, Any]:
    return {"type": "score", "instructions": "How severe is the problem?",
            "criteria": [_text(rng, rng.randint(1, 5)) for _ in range(levels)]}


def _noul(rng: random.Random, custom: bool) -> Dict[str, Any]:
    question = {"type": "noul", "instructions": "The customer asks for money back."}
    if custom:
        question["criteria"] = {"true": "a refund is requested", "false": _text(rng, 4)}
        question["labels"] = {"false": "no", "true": "yes"}
    return question


def probe_cases(max_len: int, seed: int = 0) -> List[ProbeCase]:
    """The probe batches for a checkpoint whose token budget is `max_len`."""
    rng = random.Random(seed)
    long_words = max(64, max_len)  # well past the budget once tokenised: truncation is exercised
    mixed = {"dept": _choice(rng, 4, False), "severity": _score(rng, 5),
             "refund": _noul(rng, False)}
    cases = [
        ProbeCase("short-mixed-types", [_text(rng, 5), _text(rng, 12)], mixed),
        ProbeCase("one-option", [_text(rng, 20)], {"only": _choice(rng, 1, False),
                                                   "yes": _noul(rng, True)}),
        ProbeCase("two-options", [_text(rng, 30), _text(rng, 3)],
                  {"pair": _choice(rng, 2, True), "level": _score(rng, 1)}),
        ProbeCase("many-options", [_text(rng, 40)],
                  {"wide": _choice(rng, 12, True), "widest": _choice(rng, 40, False),
                   "scale": _score(rng, 7)}),
        ProbeCase("long-states", [_text(rng, long_words), _text(rng, long_words // 3)],
                  {"dept": _choice(rng, 6, True), "refund": _noul(rng, True)}),
        ProbeCase("padded-mixed-lengths",
                  [_text(rng, n) for n in (2, 25, 90, long_words // 2, 7)], mixed),
        ProbeCase("conversation-list",
                  [[{"role": "user", "content": _text(rng, 30)},
                    {"role": "agent", "content": _text(rng, 20)},
                    {"role": "user", "content": _text(rng, long_words)}]],
                  {"dept": _choice(rng, 3, False), "angry": _noul(rng, False)}),
        ProbeCase("json-states",
                  [{"subject": _text(rng, 6), "body": _text(rng, 50), "priority": 2,
                    "tags": ["vip", "renewal"], "amount": 12.5, "ok": None},
                   {"nested": {"level": [1, 2, {"deep": _text(rng, 8)}]}, "unicode": "Grüße 東京"}],
                  {"dept": _choice(rng, 5, True), "severity": _score(rng, 3),
                   "refund": _noul(rng, False)}),
    ]
    return cases


# Added to the seed for the held-out probes: far from any seed a caller would pick next.
HELD_OUT_SEED_OFFSET = 1_000_003


def held_out_cases(max_len: int, seed: int = 0) -> List[ProbeCase]:
    """Probe batches of the same kinds with other texts and labels: a variant chosen among
    candidates on `probe_cases(max_len, seed)` is verified again on these, which no choice saw."""
    return [case._replace(name=f"held-out-{case.name}")
            for case in probe_cases(max_len, seed + HELD_OUT_SEED_OFFSET)]
