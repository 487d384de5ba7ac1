"""ONNXAgent answers against upstream laya 0.4.15 (docs/design/sequence-layout.md, decoding.md and
calls.md).

For every small test checkpoint, three runtimes answer the same calls:

* ours, `laya_edge.load(bundle)`;
* upstream's ONNX runtime on the same graph -- its payload must be identical to ours, byte for
  byte (same graph, same inputs, same batch shapes);
* upstream's PyTorch agent on the source checkpoint -- same keys, types, labels, choices, legend
  and usage, every float within 1e-4 (the `model` name differs by design).

The calls come from a seeded generator (tests/agent_support.py) plus hand-written cases that pin
every feature on every checkpoint, whatever the random draw. Invalid calls must raise upstream's
exception type with upstream's message, before anything is run.
"""
from __future__ import annotations

import random
from typing import Any, Dict, List, Optional, Tuple

import pytest

from agent_support import (KINDS, LANG_TEMPERATURES, PROFILES, assert_identical,
                           assert_matches_torch, assert_results_match_torch, edge_agent, gen_case,
                           outcome, own_outcome, text, torch_agent, upstream_onnx_agent)


@pytest.fixture(scope="module", params=KINDS)
def kind(request):
    return request.param


@pytest.fixture(scope="module")
def trio(kind, checkpoints, bundles):
    """`(ours, upstream ONNX, upstream torch)` for one checkpoint, all with the same
    per-language temperatures, built once per module and kind."""
    return (edge_agent(bundles[kind], lang_temperatures=LANG_TEMPERATURES),
            upstream_onnx_agent(bundles[kind], lang_temperatures=LANG_TEMPERATURES),
            torch_agent(checkpoints[kind], lang_temperatures=LANG_TEMPERATURES))


class SessionGuard:
    """Stands in for the onnxruntime session: any run is a test failure."""

    def __init__(self, session):
        self.session = session
        self.runs = 0

    def run(self, *args, **kwargs):
        self.runs += 1
        raise AssertionError("the session ran although the call should have failed first")

    def __getattr__(self, name):
        return getattr(self.session, name)


def compare_batch(trio, states, questions, kwargs, where=""):
    """Run one predict_batch call on all three runtimes and compare the outcomes."""
    ours, upstream, torch = trio
    got = own_outcome(lambda: ours.predict_batch(states, questions, **kwargs))
    want_onnx = outcome(lambda: upstream.predict_batch(states, questions, **kwargs))
    want_torch = outcome(lambda: torch.predict_batch(states, questions, **kwargs))
    assert got[0] == want_onnx[0] == want_torch[0], (where, got[:3], want_onnx[:3], want_torch[:3])
    if got[0] == "error":
        assert got[1:3] == want_onnx[1:3] == want_torch[1:3], where
    else:
        assert len(got[1]) == len(states), where
        assert_identical(got[1], want_onnx[1])
        assert_results_match_torch(got[1], want_torch[1], where)
    assert got[-1] == want_onnx[-1], where      # the same warnings, if any
    return got


# -- hand-written cases: every feature on every checkpoint -------------------------------------

def long_option(rng: random.Random, n: int = 90) -> str:
    return text(rng, n, odd=0.0)


# Cases that always run at the config's budget (forty options need more than a small budget).
FULL_BUDGET = ("truncation-at-the-config-budget", "forty-options-collapse")


def feature_cases(mask: str, max_len: int, budget: Optional[int] = None
                  ) -> Dict[str, Tuple[List[Any], Dict[Any, Any], Dict]]:
    """`{name: (states, questions, predict_batch kwargs)}`, the same on every checkpoint.

    `budget`, when given, is passed as the per-call `max_len` of every case that does not set
    one itself, except those in FULL_BUDGET."""
    rng = random.Random("agent-parity-features")
    short = ["My invoice was charged twice this month.", "The app crashes when I open settings."]
    dept = {"type": "choice", "instructions": "Which team should handle this ticket?",
            "criteria": ["billing", "tech", "sales"]}
    urgent = {"type": "noul", "instructions": "Is this urgent?"}
    limit = budget or max_len
    long_text = text(rng, max_len, odd=0.0)   # at least a token a word: past any max_len here
    long_chat = [{"role": "user" if i % 2 else "agent", "content": text(rng, 20, odd=0.0)}
                 for i in range(max_len // 20)] + [{"role": "user", "content": "LAST"}]
    # Labels sharing their first words: cut to 4 tokens by the head budget, they collapse.
    many = {f"support queue for category {k}": f"tickets about {text(rng, 6, odd=0.0)}"
            for k in range(40)}
    cases = {
        "single-option-choices": (short, {
            "solo": {"type": "choice", "instructions": "Pick one",
                     "criteria": {"solo": "the only choice"}},
            "only": {"type": "choice", "instructions": "Pick", "criteria": ["only"]},
            "one-level": {"type": "score", "instructions": "Rate", "criteria": ["fine"]}}, {}),
        "scalar-labels-and-structured-descriptions": (short[:1], {
            "list": {"type": "choice", "instructions": "Which value?",
                     "criteria": [0, 2.5, True, "x", -3, 1e6, "ü"]},
            "dict": {"type": "choice", "instructions": "Which?",
                     "criteria": {False: "no", 7: {"d": 1, "e": [1.5, None]}, 2.5: [1, "a"],
                                  "s": 3.25, "e": "", "n": None, "b": True, 1e-9: "tiny"}}},
            {}),
        "forty-options-collapse": (short[:1], {
            "cat": {"type": "choice", "instructions": "Which category fits best?",
                    "criteria": many},
            "plain40": {"type": "choice", "instructions": "Which number?",
                        "criteria": [f"number {k}" for k in range(40)]}}, {}),
        "long-options-cut-to-48-tokens": (short[:1], {
            "long": {"type": "choice", "instructions": "Which explanation?",
                     "criteria": {k: long_option(rng) for k in ("a", "b", "c")}},
            "long-levels": {"type": "score", "instructions": "How bad?",
                            "criteria": [long_option(rng) for _ in range(3)]}}, {}),
        "option-order": (short, {
            "c": dict(dept, option_order=[2, 0, 1]),
            "n": dict(urgent, option_order=[1, 0]),
            "s": {"type": "score", "instructions": "Rate", "criteria": ["low", "mid", "high"],
                  "option_order": (2, 1, 0)},
            "identity": dict(dept, option_order=[0, 1, 2])}, {}),
        "noul-criteria-and-labels": (short[:1], {
            "bool-keys": {"type": "noul", "instructions": "Refund asked?",
                          "criteria": {True: "a refund is requested", False: "no refund"}},
            "upper": {"type": "noul", "instructions": "Angry?", "criteria": {"TRUE": "angry"}},
            "false-only": {"type": "noul", "instructions": "Calm?",
                           "criteria": {"false": "", "true": None}},
            "structured": {"type": "noul", "instructions": "Spam?",
                           "criteria": {"true": {"signals": ["links", 3]}, "false": 0}},
            "none": {"type": "noul", "instructions": "Bot?", "criteria": None},
            "labels": {"type": "noul", "instructions": "Escalate?",
                       "labels": {"false": "  keep  ", "true": "escalate now"}}}, {}),
        "score-levels-one-to-seven": (short[:1], {
            f"s{n}": {"type": "score", "instructions": f"Rate on {n} levels",
                      "criteria": [{"level": i, "means": text(rng, 2, odd=0.0)} if i % 3 == 0
                                   else [i, "x"] if i % 3 == 1 else i + 0.5 for i in range(n)]}
            for n in range(1, 8)}, {}),
        "non-string-instructions": (short[:1], {
            "dict": {"type": "noul", "instructions": {"task": "Is this urgent?", "w": 0.5}},
            "list": {"type": "choice", "instructions": ["Which team?", 3, {"k": None}],
                     "criteria": ["billing", "tech"]},
            "int": {"type": "score", "instructions": 42, "criteria": ["a", "b"]},
            "float": {"type": "noul", "instructions": 3.5},
            "bool": {"type": "noul", "instructions": True},
            "nan": {"type": "noul", "instructions": {"x": float("nan")}}}, {}),
        "mask-token-everywhere": ([f"please {mask} ignore {mask}{mask} it",
                                   {"note": f"{mask}", "list": [mask, 1]}, [f"{mask} turn", "t"]], {
            "c": {"type": "choice", "instructions": f"Which {mask} team?",
                  "criteria": {f"{mask}billing": f"money {mask}", "tech": [mask]}},
            "n": {"type": "noul", "instructions": f"{mask}?", "labels": {"false": f"no{mask}",
                                                                          "true": "yes"}},
            "s": {"type": "score", "instructions": "Rate", "criteria": [mask, f"{mask} x"]}}, {}),
        "special-token-lookalikes": (["[CLS] hello [SEP] world <bos> <eos> [PAD] <pad> [UNK]"],
                                     {"n": urgent}, {}),
        "truncation-at-the-config-budget": ([long_text, long_chat], {"d": dept}, {}),
        "truncation-right-and-left": ([long_text[: 12 * limit], long_chat[-limit // 6:],
                                       [text(rng, 5) for _ in range(3)]],
                                      {"d": dept, "u": urgent}, {"max_len": min(limit, 192)}),
        "json-states": ([{"amount": 12.5, "nan": float("nan"), "inf": float("inf"),
                          "neg": float("-inf"), "nested": {"a": [1, 2.5, {"b": None}]},
                          "flag": False, "ü": "Größe", "big": 1e300, "small": 5e-324},
                         [1, 2.0, None, True, "x"], {"empty": {}}, []], {"d": dept}, {}),
        "empty-and-unicode-states": (["", " ", "\n", "日本語のテキスト 😀🚀", "e\u0301 \u200b"],
                                     {"d": dept, "u": urgent}, {}),
        "int-and-bool-question-ids": (short[:1], {0: dept, 7: urgent, True: dept, "7": urgent},
                                      {}),
        "batch-size-and-sorting": ([long_text[: 30 * (i + 1)] for i in range(7)], {"u": urgent},
                                   {"batch_size": 2, "sort_by_length": True}),
        "batch-size-one": (short + [long_text[:300]], {"d": dept}, {"batch_size": 1}),
        "batch-size-three": (short * 2 + ["x"], {"d": dept, "u": urgent}, {"batch_size": 3}),
        "per-call-budgets": ([long_text, "short"], {"d": dept, "many": {
            "type": "choice", "instructions": "Which?", "criteria": many}},
                             {"max_len": 256, "head_max_len": 100}),
        "tight-head-budget": (short[:1], {"d": dept, "long": {
            "type": "choice", "instructions": long_option(rng, 60),
            "criteria": {k: long_option(rng, 30) for k in "abcd"}}}, {"head_max_len": 24}),
        "lang-override": (short, {"d": dept, "u": urgent, "s": {
            "type": "score", "instructions": "Rate", "criteria": ["a", "b", "c", "d"]}},
                          {"lang": "de-AT"}),
        "lang-inherited": (short, {"d": dept, "u": urgent}, {"lang": "fr"}),
        "lang-underscore-does-not-match": (short, {"d": dept}, {"lang": "de_DE"}),
        "min-confidence-scalar": (short, {"d": dept, "u": urgent}, {"min_confidence": 0.5}),
        "min-confidence-map": (short, {"d": dept, "u": urgent, "one": {
            "type": "choice", "instructions": "x", "criteria": ["only"]}},
                               {"min_confidence": {"choice:3-5": 0.9, "default": 0.2}}),
    }
    if budget is not None:
        for name, (states, questions, kwargs) in cases.items():
            if "max_len" not in kwargs and name not in FULL_BUDGET:
                kwargs["max_len"] = budget
    return cases


def cases_for(ours, kind):
    return feature_cases(ours.encoder.mask.text, ours.max_len, PROFILES[kind].get("max_len"))


@pytest.mark.parametrize("name", list(feature_cases("[MASK]", 512)))
def test_feature_case_matches_upstream(trio, kind, name):
    states, questions, kwargs = cases_for(trio[0], kind)[name]
    got = compare_batch(trio, states, questions, kwargs, name)
    assert got[0] == "ok", got[:3]


def test_feature_cases_exercise_what_they_are_named_for(trio, kind):
    """The hand-written cases really reach the paths they are named after (ours only)."""
    ours = trio[0]
    cases = cases_for(ours, kind)

    def run(name):
        states, questions, kwargs = cases[name]
        return ours.predict_batch(states, questions, **kwargs)

    collapsed = run("forty-options-collapse")
    assert collapsed[0]["usage"]["options"]["cat"]["distinct"] < 40
    head_max_len = cases["forty-options-collapse"][2].get("head_max_len", ours.head_max_len)
    assert collapsed[0]["usage"]["options"]["cat"]["tokens_per_option"] == max(
        4, (head_max_len - 16) // 40)                          # sequence-layout.md#one-row, step 3
    assert "options" not in run("option-order")[0]["usage"]
    # long options are cut to their first 48 tokens, plus the marker
    # (docs/design/sequence-layout.md#one-row)
    from laya_edge.questions import normalise
    long_question = normalise(cases["long-options-cut-to-48-tokens"][1]["long"])
    head = ours.encoder.head(long_question, ours.head_max_len)
    assert [b - a for a, b in zip(head.markers, head.markers[1:])] == [49, 49]
    assert head.tokens_per_option is None
    assert "options" not in run("long-options-cut-to-48-tokens")[0]["usage"]
    for name in ("truncation-right-and-left", "truncation-at-the-config-budget"):
        cut = run(name)
        assert cut[0]["usage"]["truncated"] and cut[1]["usage"]["truncated"]
        assert cut[0]["usage"]["truncated_questions"] == list(cases[name][1])
    assert not run("truncation-right-and-left")[2]["usage"]["truncated"]
    # a conversation keeps its newest turns (docs/design/sequence-layout.md#one-row): dropping its
    # oldest turn does not change the answer, rewriting its newest turn does
    states, questions, kwargs = cases["truncation-at-the-config-budget"]
    chat = states[1]
    full = cut_answers(ours, chat, questions, kwargs)
    assert cut_answers(ours, chat[1:], questions, kwargs) == full
    rewritten = chat[:-1] + [{"role": "user", "content": "please cancel the whole contract now "
                              "and refund every payment made on this account this year"}]
    assert cut_answers(ours, rewritten, questions, kwargs) != full
    # a text keeps its beginning: changing its end does not change the answer
    assert cut_answers(ours, states[0] + " and a different ending", questions, kwargs) == \
        cut_answers(ours, states[0], questions, kwargs)
    single = run("single-option-choices")[0]["answers"]
    assert single["solo"]["probabilities"] == {"solo": 1.0}
    assert single["solo"]["confidence"] == single["solo"]["answer_confidence"] == 1.0
    assert single["one-level"]["score"] == 0.0
    keys = run("scalar-labels-and-structured-descriptions")[0]["answers"]["list"]["probabilities"]
    assert [type(k) for k in keys] == [int, float, bool, str, int, float, str]
    ids = run("int-and-bool-question-ids")[0]["answers"]
    assert list(ids) == [0, 7, True, "7"]
    gated = run("min-confidence-map")[0]["answers"]
    assert gated["d"]["abstention_threshold"] == 0.9
    assert gated["u"]["abstention_threshold"] == 0.2
    assert gated["one"]["abstention"] == "passed"
    plain = ours.predict_batch(*cases["lang-override"][:2])
    assert run("lang-override")[0]["answers"]["s"] != plain[0]["answers"]["s"]
    assert run("lang-underscore-does-not-match") == ours.predict_batch(
        *cases["lang-underscore-does-not-match"][:2])


def cut_answers(ours, state, questions, kwargs):
    return ours.predict_batch([state], questions, **kwargs)[0]["answers"]["d"]


# -- generated cases ---------------------------------------------------------------------------

GENERATED_CHUNKS = 4


@pytest.mark.parametrize("chunk", range(GENERATED_CHUNKS))
def test_generated_cases_match_upstream(trio, kind, chunk):
    """Seeds `chunk, chunk + 4, ...` of this checkpoint's generated cases (tests/agent_support.py);
    the expensive checkpoints get fewer seeds (PROFILES)."""
    profile = PROFILES[kind]
    ours = trio[0]
    seeds = range(chunk, profile["cases"], GENERATED_CHUNKS)
    answered = 0
    for seed in seeds:
        states, questions, kwargs = gen_case(seed, ours.encoder.mask.text, ours.max_len, profile)
        got = compare_batch(trio, states, questions, kwargs, f"{kind} seed {seed} {kwargs}")
        answered += got[0] == "ok"
    assert answered >= len(seeds) / 2     # mostly answers; the rest agree on the same error


def test_generator_covers_the_input_space(trio, kind):
    """The shapes the generated cases are meant to cover really occur on this checkpoint
    (inputs inspected with our tokenizer; no inference)."""
    from laya_edge.questions import normalise

    ours = trio[0]
    mask = ours.encoder.mask.text
    profile = PROFILES[kind]
    seen = set()
    for seed in range(profile["cases"]):
        states, questions, kwargs = gen_case(seed, mask, ours.max_len, profile)
        seen.update(f"kw:{key}" for key in kwargs)
        max_len = kwargs.get("max_len") or ours.max_len
        head_max_len = kwargs.get("head_max_len") or ours.head_max_len
        for state, ids in zip(states, ours.encoder.state_ids(states)):
            seen.add(f"state:{type(state).__name__}")
            if mask in str(state):
                seen.add("state:mask")
            if len(ids) > max_len:
                seen.add(f"past-max-len:{type(state).__name__}")
        for qid, definition in questions.items():
            seen.add(f"qid:{type(qid).__name__}")
            seen.add(f"type:{definition['type']}")
            seen.add(f"ins:{type(definition['instructions']).__name__}")
            seen.update(key for key in ("option_order", "labels") if key in definition)
            if definition["type"] == "choice":
                seen.add(f"criteria:{type(definition['criteria']).__name__}")
            head = ours.encoder.head(normalise(definition), head_max_len)
            if head.options_distinct < head.options:
                seen.add("options-collapse")
    required = {"state:str", "state:list", "state:dict", "state:mask", "past-max-len:str",
                "past-max-len:list", "qid:int", "qid:str", "type:choice", "type:score",
                "type:noul", "ins:str", "criteria:list", "criteria:dict", "option_order", "labels",
                "kw:batch_size", "options-collapse"}
    assert required <= seen, sorted(required - seen)


# -- invalid inputs: upstream's exception type and message, before anything runs ---------------

VALID = {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}
NOUL = {"type": "noul", "instructions": "Urgent?"}
SCORE = {"type": "score", "instructions": "Rate", "criteria": ["low", "high"]}
STATES = ["a state"]


def q(**changes):
    return {**VALID, **changes}


def without(definition, key):
    return {k: v for k, v in definition.items() if k != key}


# (id, states, questions, expected type, expected message). The expected messages are the
# documented ones (docs/design/calls.md#predict_batch); each is also compared with upstream's torch
# agent.
INVALID = [
    # 14.1 -- TypeErrors
    ("bare-string", "a state", {"q": VALID}, TypeError,
     "predict_batch expects a list of states; pass a single state to predict()/system_one()."),
    ("bytes", b"a state", {"q": VALID}, TypeError,
     "predict_batch expects a list of states; pass a single state to predict()/system_one()."),
    ("dict-state", {"text": "x"}, {"q": VALID}, TypeError,
     "predict_batch expects a list of states; pass a single state to predict()/system_one()."),
    ("questions-list", STATES, [("q", VALID)], TypeError,
     "questions must be a dict of question id -> definition, got list"),
    ("questions-none", STATES, None, TypeError,
     "questions must be a dict of question id -> definition, got NoneType"),
    ("questions-str", STATES, "q", TypeError,
     "questions must be a dict of question id -> definition, got str"),
    ("none-state", ["ok", None], {"q": VALID}, TypeError,
     "state must not be None; pass a string, dict, or list"),
    ("none-state-no-questions", [None], {}, TypeError,
     "state must not be None; pass a string, dict, or list"),
    ("unserialisable-state", [{"x": object()}], {"q": VALID}, TypeError,
     "Object of type object is not JSON serializable"),
    ("set-state", [{1, 2}], {"q": VALID}, TypeError, "Object of type set is not JSON serializable"),
    # 14.2.1 ids
    ("id-none", STATES, {None: VALID}, ValueError, "question id must not be None"),
    ("id-empty", STATES, {"": VALID}, ValueError, "question id must be a non-empty string, got ''"),
    ("id-blank", STATES, {" \t": VALID}, ValueError,
     "question id must be a non-empty string, got ' \\t'"),
    ("id-float", STATES, {1.5: VALID}, ValueError,
     "question id must be a non-empty string, got 1.5"),
    ("id-tuple", STATES, {("a",): VALID}, ValueError,
     "question id must be a non-empty string, got ('a',)"),
    # 14.2.2 definition
    ("definition-list", STATES, {"q": ["choice"]}, ValueError,
     "question 'q': definition must be a dict, got list"),
    ("definition-none", STATES, {7: None}, ValueError,
     "question 7: definition must be a dict, got NoneType"),
    # 14.2.3 type
    ("type-missing", STATES, {"q": without(VALID, "type")}, ValueError,
     "question 'q': unknown type None; use one of ['choice', 'noul', 'score']"),
    ("type-unknown", STATES, {"q": q(type="multi")}, ValueError,
     "question 'q': unknown type 'multi'; use one of ['choice', 'noul', 'score']"),
    ("type-case", STATES, {"q": q(type="Choice")}, ValueError,
     "question 'q': unknown type 'Choice'; use one of ['choice', 'noul', 'score']"),
    ("type-int", STATES, {"q": q(type=0)}, ValueError,
     "question 'q': unknown type 0; use one of ['choice', 'noul', 'score']"),
    # 14.2.4 instructions
    ("instructions-missing", STATES, {"q": without(VALID, "instructions")}, ValueError,
     "question 'q': no 'instructions'; add the text the model should answer"),
    ("instructions-none", STATES, {"q": q(instructions=None)}, ValueError,
     "question 'q': 'instructions' must not be None; add the text the model should answer"),
    ("instructions-blank", STATES, {"q": q(instructions=" \n ")}, ValueError,
     "question 'q': 'instructions' must not be empty; add the text the model should answer"),
    ("instructions-empty-list", STATES, {"q": q(instructions=[])}, ValueError,
     "question 'q': 'instructions' must not be empty; add the text the model should answer"),
    ("instructions-empty-dict", STATES, {"q": q(instructions={})}, ValueError,
     "question 'q': 'instructions' must not be empty; add the text the model should answer"),
    ("instructions-bytes", STATES, {"q": q(instructions=b"x")}, ValueError,
     "question 'q': 'instructions' must be a string, dict, or list, got bytes"),
    ("instructions-tuple", STATES, {"q": q(instructions=("x",))}, ValueError,
     "question 'q': 'instructions' must be a string, dict, or list, got tuple"),
    # 14.2.5 choice
    ("choice-criteria-missing", STATES, {"q": without(VALID, "criteria")}, ValueError,
     "question 'q': a choice question takes 'criteria' as a dict of label -> description, or a "
     "list of labels"),
    ("choice-criteria-str", STATES, {"q": q(criteria="billing,tech")}, ValueError,
     "question 'q': a choice question takes 'criteria' as a dict of label -> description, or a "
     "list of labels"),
    ("choice-criteria-tuple", STATES, {"q": q(criteria=("a", "b"))}, ValueError,
     "question 'q': a choice question takes 'criteria' as a dict of label -> description, or a "
     "list of labels"),
    ("choice-empty-list", STATES, {"q": q(criteria=[])}, ValueError,
     "question 'q': a choice question needs at least one criterion"),
    ("choice-empty-dict", STATES, {"q": q(criteria={})}, ValueError,
     "question 'q': a choice question needs at least one criterion"),
    ("choice-label-tuple", STATES, {"q": q(criteria=["a", ("t",)])}, ValueError,
     "question 'q': choice label 1 is a tuple; a label is rendered as option text and used as "
     "the answer key, so it must be a scalar (a string, number or bool), got ('t',)"),
    ("choice-label-list", STATES, {"q": q(criteria=["a", ["b"]])}, ValueError,
     "question 'q': choice label 1 is a list; a label is rendered as option text and used as "
     "the answer key, so it must be a scalar (a string, number or bool), got ['b']"),
    ("choice-label-bytes", STATES, {"q": q(criteria={b"x": "y"})}, ValueError,
     "question 'q': choice label 0 is a bytes; a label is rendered as option text and used as "
     "the answer key, so it must be a scalar (a string, number or bool), got b'x'"),
    ("choice-label-frozenset", STATES, {"q": q(criteria={"a": 1, frozenset(): "y"})}, ValueError,
     "question 'q': choice label 1 is a frozenset; a label is rendered as option text and used "
     "as the answer key, so it must be a scalar (a string, number or bool), got frozenset()"),
    ("choice-label-null-list", STATES, {"q": q(criteria=["a", None])}, ValueError,
     "question 'q': choice label 1 is null; a label is rendered as option text and used as the "
     "answer key, so it must be a string, number or bool -- a null label renders as the text "
     "\"None\" while its answer key is \"null\""),
    ("choice-label-null-dict", STATES, {"q": q(criteria={None: "x"})}, ValueError,
     "question 'q': choice label 0 is null; a label is rendered as option text and used as the "
     "answer key, so it must be a string, number or bool -- a null label renders as the text "
     "\"None\" while its answer key is \"null\""),
    ("choice-repeat", STATES, {"q": q(criteria=["x", "y", "x"])}, ValueError,
     "question 'q': choice label 2 ('x') repeats label 0; the labels are the answer keys, so "
     "every option needs its own (1, 1.0 and True are one key)"),
    ("choice-repeat-float", STATES, {"q": q(criteria=["a", 1, 1.0])}, ValueError,
     "question 'q': choice label 2 (1.0) repeats label 1; the labels are the answer keys, so "
     "every option needs its own (1, 1.0 and True are one key)"),
    ("choice-repeat-bool", STATES, {"q": q(criteria=[True, 1])}, ValueError,
     "question 'q': choice label 1 (1) repeats label 0; the labels are the answer keys, so "
     "every option needs its own (1, 1.0 and True are one key)"),
    # 14.2.6 score
    ("score-criteria-dict", STATES, {"q": {**SCORE, "criteria": {"0": "low"}}}, ValueError,
     "question 'q': a score question takes 'criteria' as a list of level descriptions, index 0 "
     "first"),
    ("score-criteria-missing", STATES, {"q": without(SCORE, "criteria")}, ValueError,
     "question 'q': a score question takes 'criteria' as a list of level descriptions, index 0 "
     "first"),
    ("score-empty", STATES, {"q": {**SCORE, "criteria": []}}, ValueError,
     "question 'q': a score question needs at least one level"),
    ("score-null-level", STATES, {"q": {**SCORE, "criteria": ["a", None, "c", None]}}, ValueError,
     "question 'q': score level 1 is null; give every level a description, index 0 first"),
    # 14.2.7 noul
    ("noul-criteria-list", STATES, {"q": {**NOUL, "criteria": ["yes"]}}, ValueError,
     "question 'q': a noul question takes 'criteria' as a dict with optional 'true'/'false' "
     "descriptions, or omits it"),
    ("noul-criteria-str", STATES, {"q": {**NOUL, "criteria": "true"}}, ValueError,
     "question 'q': a noul question takes 'criteria' as a dict with optional 'true'/'false' "
     "descriptions, or omits it"),
    ("noul-criteria-keys", STATES, {"q": {**NOUL, "criteria": {True: "x", "Maybe": "y"}}},
     ValueError,
     "question 'q': a noul question takes 'criteria' keyed only 'true'/'false' (either or both, "
     "and omitted is fine), got ['maybe', 'true']. Those keys are the option texts the model "
     "reads; any other key was silently dropped and replaced with the defaults. If you want the "
     "answer worded differently, keep 'criteria' keyed 'true'/'false' and set 'labels' instead."),
    # 14.2.8 option_order
    ("order-length", STATES, {"q": q(option_order=[0])}, ValueError,
     "question 'q': 'option_order' must be a permutation of range(2) -- one slot per option, "
     "each option once -- got [0]"),
    ("order-repeat", STATES, {"q": q(criteria=["a", "b", "c"], option_order=[0, 0, 1])},
     ValueError,
     "question 'q': 'option_order' must be a permutation of range(3) -- one slot per option, "
     "each option once -- got [0, 0, 1]"),
    ("order-bools", STATES, {"q": {**NOUL, "option_order": [False, True]}}, ValueError,
     "question 'q': 'option_order' must be a permutation of range(2) -- one slot per option, "
     "each option once -- got [False, True]"),
    ("order-floats", STATES, {"q": {**SCORE, "option_order": [1.0, 0.0]}}, ValueError,
     "question 'q': 'option_order' must be a permutation of range(2) -- one slot per option, "
     "each option once -- got [1.0, 0.0]"),
    ("order-str", STATES, {"q": q(option_order="01")}, ValueError,
     "question 'q': 'option_order' must be a permutation of range(2) -- one slot per option, "
     "each option once -- got '01'"),
    ("order-none", STATES, {"q": q(option_order=None)}, ValueError,
     "question 'q': 'option_order' must be a permutation of range(2) -- one slot per option, "
     "each option once -- got None"),
    # 14.2.9 labels
    ("labels-on-choice", STATES, {"q": q(labels={"false": "n", "true": "y"})}, ValueError,
     "question 'q': 'labels' is only supported for noul questions"),
    ("labels-on-score", STATES, {"q": {**SCORE, "labels": None}}, ValueError,
     "question 'q': 'labels' is only supported for noul questions"),
    ("labels-missing-key", STATES, {"q": {**NOUL, "labels": {"true": "y"}}}, ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    ("labels-extra-key", STATES, {"q": {**NOUL, "labels": {"true": "y", "false": "n", "x": "z"}}},
     ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    ("labels-not-str", STATES, {"q": {**NOUL, "labels": {"true": 1, "false": 0}}}, ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    ("labels-blank", STATES, {"q": {**NOUL, "labels": {"true": "y", "false": "  "}}}, ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    ("labels-same", STATES, {"q": {**NOUL, "labels": {"true": "yes", "false": " yes "}}},
     ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    ("labels-list", STATES, {"q": {**NOUL, "labels": ["n", "y"]}}, ValueError,
     "question 'q': noul labels must map exactly 'false' and 'true' to distinct non-empty strings"),
    # first failure in dict order wins
    ("first-failure-wins", STATES, {"ok": VALID, "bad1": without(VALID, "type"),
                                    "bad2": q(criteria=[])}, ValueError,
     "question 'bad1': unknown type None; use one of ['choice', 'noul', 'score']"),
]


def _marker_overflow_case():
    """docs/design/sequence-layout.md#when-the-options-do-not-fit: forty options cannot all place a
    marker inside max_len=96."""
    criteria = [f"option number {k}" for k in range(40)]
    return ["a state"], {"many": q(criteria=criteria)}, {"max_len": 96}


@pytest.mark.parametrize("name,states,questions,error,message", INVALID,
                         ids=[case[0] for case in INVALID])
def test_invalid_call_raises_upstreams_error_before_inference(trio, monkeypatch, name, states,
                                                              questions, error, message):
    ours, upstream, torch = trio
    guard = SessionGuard(ours.session)
    monkeypatch.setattr(ours, "session", guard)
    got = own_outcome(lambda: ours.predict_batch(states, questions))
    assert got[:3] == ("error", error, message)
    assert guard.runs == 0
    assert outcome(lambda: torch.predict_batch(states, questions))[:3] == got[:3]
    assert outcome(lambda: upstream.predict_batch(states, questions))[:3] == got[:3]


def test_marker_overflow_raises_upstreams_error_before_inference(trio, monkeypatch):
    ours, upstream, torch = trio
    states, questions, kwargs = _marker_overflow_case()
    guard = SessionGuard(ours.session)
    monkeypatch.setattr(ours, "session", guard)
    got = own_outcome(lambda: ours.predict_batch(states, questions, **kwargs))
    assert got[0] == "error" and got[1] is ValueError
    assert got[2].startswith("question 'many': only ") and got[2].endswith(
        "of its 40 option markers fit in max_len=96 with head_max_len=%d spent on the question; "
        "lower head_max_len, raise max_len, or use fewer options" % ours.head_max_len)
    assert guard.runs == 0
    assert outcome(lambda: torch.predict_batch(states, questions, **kwargs))[:3] == got[:3]
    assert outcome(lambda: upstream.predict_batch(states, questions, **kwargs))[:3] == got[:3]


def test_single_state_entry_points_reject_like_upstream(trio):
    ours, upstream, torch = trio
    for call in (lambda a: a.system_one(None, {"q": VALID}),
                 lambda a: a.predict(None, {"q": VALID}),
                 lambda a: a.system_one("x", ["not", "a", "dict"]),
                 lambda a: a.predict_long(None, {"q": VALID}),
                 lambda a: a.predict_long("x", "questions"),
                 lambda a: a.predict_long("x", {"q": VALID}, aggregate="mean"),
                 lambda a: a.predict_long("x", {"q": without(VALID, "instructions")}),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, min_confidence=1.5),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, min_confidence=True),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, min_confidence=float("nan")),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, min_confidence={}),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, min_confidence={"choice:7": 0.1}),
                 lambda a: a.predict_batch(["x"], {"q": VALID},
                                           min_confidence={"default": -0.1}),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, hooks_timeout=0),
                 lambda a: a.predict_batch(["x"], {"q": VALID}, hooks=[print])):
        got = outcome(lambda: call(ours))
        assert got[0] == "error", got
        assert outcome(lambda: call(torch))[:3] == got[:3]
        assert outcome(lambda: call(upstream))[:3] == got[:3]


def test_validation_skipped_without_states_like_upstream(trio):
    """No states: nothing is validated or tokenised (docs/design/calls.md#predict_batch), as
    upstream."""
    ours, upstream, torch = trio
    bad = {"q": without(VALID, "type")}
    assert ours.predict_batch([], bad) == upstream.predict_batch([], bad) == torch.predict_batch(
        [], bad) == []
    assert ours.predict_batch(["x", "y"], {}) == upstream.predict_batch(["x", "y"], {}) == [
        {"model": "laya-rl-agent-onnx", "answers": {},
         "usage": {"input_tokens": 0, "output_tokens": 0}}] * 2


# -- predict_long --------------------------------------------------------------------------------

DEPT = {"type": "choice", "instructions": "Which team should handle this ticket?",
        "criteria": ["billing", "tech", "sales"]}
LONG_QUESTIONS = {"dept": DEPT, "urgent": {"type": "noul", "instructions": "Is this urgent?"},
                  "sev": {"type": "score", "instructions": "How severe?",
                          "criteria": ["none", "minor", "major", "critical"]}}
SHORTLIST_POINTERS = (
    (" A label set this large is what laya.shortlist.predict_shortlist is for", ""),
    ("Fewer or shorter options, a larger max_len, or laya.shortlist.predict_shortlist for a large "
     "label set will all cost less than", "Fewer or shorter options or a larger max_len will cost "
     "less than"),
)


def without_shortlist_pointer(message: str) -> str:
    """Upstream's text with its pointer to laya.shortlist removed
    (docs/design/upstream-differences.md#wording)."""
    for old, new in SHORTLIST_POINTERS:
        message = message.replace(old, new)
    return message


def normalised(result: Tuple) -> Tuple:
    """An outcome with upstream's shortlist pointers removed from the error and warning texts."""
    if result[0] == "error":
        result = result[:2] + (without_shortlist_pointer(result[2]),) + result[3:]
    return result[:-1] + ([(c, without_shortlist_pointer(m)) for c, m in result[-1]],)


def many_options(count: int) -> Dict[str, Any]:
    return {"type": "choice", "instructions": "Which topic is this about?",
            "criteria": [f"topic number {k} of the catalogue" for k in range(count)]}


def options_for_room(ours, room: int) -> int:
    """How many collapsed options (4 tokens each) leave about `room` state tokens."""
    return max(1, (ours.max_len - room - 12) // 4)


def tokens_long(ours, rng: random.Random, tokens: int, odd: float = 0.02) -> str:
    """Text of at least `tokens` tokens for this checkpoint's tokenizer (and not much more)."""
    words: List[str] = []
    while len(ours.encoder.encode(" ".join(words))) < tokens:
        words.append(text(rng, 10, odd=odd))
    return " ".join(words)


LONG_CASE_NAMES = (
    "default-window", "explicit-window-and-stride", "stride-equals-window", "explicit-batch-size",
    "with-lang", "conversation", "json-record", "fits-one-window", "fits-explicit-window",
    "capped-scan", "window-wider-than-room", "default-window-capped", "stride-reduced-with-window",
    "stride-past-window", "stride-past-reduced-window", "no-room-for-the-state",
    "empty-questions")


def long_cases(ours) -> Dict[str, Tuple[Any, Dict[Any, Any], Dict[str, Any]]]:
    """`{name: (state, questions, predict_long kwargs)}`.

    Sized to keep the forward passes few: the default-window scan reads a document just past the
    room its questions leave; explicit windows scan a shorter one; the capped-window warnings
    fire before the scan, on documents that then fit one (capped) window."""
    rng = random.Random("agent-parity-long")
    two = {"dept": LONG_QUESTIONS["dept"], "urgent": LONG_QUESTIONS["urgent"]}
    room = ours._min_room(two, ours.max_len, ours.head_max_len)
    document = tokens_long(ours, rng, room + 60)
    short_document = tokens_long(ours, rng, 240)
    chat = []
    while len(ours.encoder.state_ids([chat])[0]) < 260:
        chat.append(text(rng, 12, odd=0.0))
    record = {"id": 7, "body": tokens_long(ours, rng, 200, odd=0.0), "amount": 12.5,
              "nan": float("nan")}
    default = max(64, ours.max_len - ours.head_max_len - 8)
    capped = many_options(options_for_room(ours, default // 2 - 30))
    capped_room = ours._min_room({"capped": capped}, ours.max_len, ours.head_max_len)
    fits_capped = tokens_long(ours, rng, capped_room // 2)
    return {
        "default-window": (document, two, {}),
        "explicit-window-and-stride": (short_document, LONG_QUESTIONS,
                                       {"window": 96, "stride": 48}),
        "stride-equals-window": (short_document, {"urgent": LONG_QUESTIONS["urgent"]},
                                 {"window": 80, "stride": 80}),
        "explicit-batch-size": (short_document, two, {"window": 100, "batch_size": 2}),
        "with-lang": (short_document, LONG_QUESTIONS, {"window": 128, "lang": "de"}),
        "conversation": (chat, two, {"window": 120, "stride": 100}),
        "json-record": (record, two, {"window": 100}),
        "fits-one-window": ("short state that fits", LONG_QUESTIONS, {}),
        "fits-explicit-window": (text(rng, 20, odd=0.0), LONG_QUESTIONS, {"window": 100}),
        "capped-scan": (tokens_long(ours, rng, capped_room * 2), {"capped": capped}, {}),
        "window-wider-than-room": (fits_capped, {"capped": capped}, {"window": 10 ** 5}),
        "default-window-capped": (fits_capped, {"capped": capped}, {}),
        "stride-reduced-with-window": (fits_capped, {"capped": capped},
                                       {"window": 10 ** 4, "stride": 5000}),
        "stride-past-window": (document, LONG_QUESTIONS, {"window": 64, "stride": 65}),
        "stride-past-reduced-window": (document, {"capped": capped},
                                       {"window": 1000, "stride": 1001}),
        "no-room-for-the-state": (document, {"huge": many_options(ours.max_len // 4 + 5)}, {}),
        "empty-questions": (short_document, {}, {"window": 64}),
    }


@pytest.mark.parametrize("name", LONG_CASE_NAMES)
def test_predict_long_matches_upstream(trio, name):
    ours, upstream, torch = trio
    cases = long_cases(ours)
    assert tuple(cases) == LONG_CASE_NAMES
    state, questions, kwargs = cases[name]
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    want = normalised(outcome(lambda: upstream.predict_long(state, questions, **kwargs)))
    want_torch = normalised(outcome(lambda: torch.predict_long(state, questions, **kwargs)))
    assert got[0] == want[0] == want_torch[0], (got[:3], want[:3], want_torch[:3])
    assert got[-1] == want[-1] == want_torch[-1]
    if got[0] == "error":
        assert got[1:3] == want[1:3] == want_torch[1:3]
        return
    assert_identical(got[1], want[1])
    assert_matches_torch(got[1], want_torch[1], name)
    usage = got[1]["usage"]
    scanned = name not in ("fits-one-window", "fits-explicit-window", "window-wider-than-room",
                           "default-window-capped", "stride-reduced-with-window")
    assert (usage["windows"] > 1) is scanned, usage
    for answer in got[1]["answers"].values():
        assert ("window" in answer) is scanned
        if scanned:
            assert answer["window"]["count"] == usage["windows"]


def test_predict_long_window_texts_are_the_spec_texts(trio):
    """The laya_edge wording of the window sizing checks (upstream's minus its laya.shortlist
    pointer)."""
    ours = trio[0]
    cases = long_cases(ours)
    default = max(64, ours.max_len - ours.head_max_len - 8)

    state, questions, kwargs = cases["default-window-capped"]
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    assert got[0] == "ok"
    room = ours._min_room(questions, ours.max_len, ours.head_max_len)
    assert default >= 2 * room
    assert got[-1] == [(RuntimeWarning,
                        f"laya: predict_long: these questions leave only {room} of "
                        f"max_len={ours.max_len} for the state (their heads take the rest), so the "
                        f"scan window is capped {default} -> {room} and roughly "
                        f"{default / room:.1f}x as many windows -- each a full forward pass -- are "
                        "needed to read the document. Fewer or shorter options or a larger max_len "
                        "will cost less than scanning at this width")]

    state, questions, kwargs = cases["window-wider-than-room"]
    room = ours._min_room(questions, ours.max_len, ours.head_max_len)
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    assert got[-1] == [(RuntimeWarning,
                        f"laya: predict_long: window=100000 is wider than the {room} state tokens "
                        f"these questions leave inside max_len={ours.max_len}, so every window "
                        f"would be truncated to {room} on the way to the model; scanning with "
                        f"window={room} instead")]

    state, questions, kwargs = cases["stride-reduced-with-window"]
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    assert got[-1][-1] == (RuntimeWarning,
                           f"laya: predict_long: stride=5000 was a 50% step for the window=10000 "
                           f"you asked for, but the window was reduced to {room} to fit the room "
                           f"these questions leave; scanning with stride={room // 2} instead")

    state, questions, kwargs = cases["stride-past-reduced-window"]
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    assert got[1:3] == (ValueError,
                        f"predict_long: stride=1001 steps past the {room}-token window these "
                        f"questions leave room for, so {1001 - room} tokens between every pair of "
                        f"windows would be read by no window at all; pass stride <= {room}")

    state, questions, kwargs = cases["no-room-for-the-state"]
    got = own_outcome(lambda: ours.predict_long(state, questions, **kwargs))
    assert got[1:3] == (ValueError,
                        f"predict_long: the questions' options fill the whole sequence "
                        f"(max_len={ours.max_len}, head_max_len={ours.head_max_len}), leaving no "
                        "room for the state; no window can carry any of it.")


def test_predict_long_single_window_is_system_one_plus_windows(trio):
    ours = trio[0]
    state = "The app crashes when I open settings."
    long_result = ours.predict_long(state, LONG_QUESTIONS)
    single = ours.system_one(state, LONG_QUESTIONS)
    assert long_result == {**single, "usage": {**single["usage"], "windows": 1}}
    assert all("window" not in answer for answer in long_result["answers"].values())


def test_predict_long_windows_cover_the_document(trio):
    """Window spans start at 0, step by the stride, end at the token count, and the deciding
    window of each answer is one of them (docs/design/calls.md#aggregation)."""
    ours = trio[0]
    state = long_cases(ours)["explicit-window-and-stride"][0]
    questions = {"urgent": LONG_QUESTIONS["urgent"]}
    n = len(ours.encoder.state_ids([state])[0])
    result = ours.predict_long(state, questions, window=100, stride=60)
    count = result["usage"]["windows"]
    starts = list(range(0, n, 60))
    starts = starts[: next(i for i, s in enumerate(starts) if s + 100 >= n) + 1]
    assert count == len(starts)
    for answer in result["answers"].values():
        window = answer["window"]
        assert window["token_start"] == starts[window["index"]]
        assert window["token_end"] == min(window["token_start"] + 100, n)
        assert window["count"] == count
    assert result["usage"]["output_tokens"] == 0
    assert result["usage"]["truncated"] == 0         # every window fits its room
    assert result["usage"]["state_tokens"] > n      # the overlap is counted in every window
