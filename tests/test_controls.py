"""Call controls, question-key and long-question warnings, the position limit and the answer's
source, each checked against upstream laya 0.4.15's PyTorch agent on the same checkpoint: where it
answers we answer the same (maybe warning), where it raises we raise its type, naming the argument.
"""
from __future__ import annotations

import json
import shutil
import warnings

import pytest
from agent_support import assert_matches_torch, edge_agent, outcome, torch_agent

import laya_edge
from laya_edge.controls import LangTypeError

QUESTIONS = {"urgent": {"type": "noul", "instructions": "Is this urgent?"},
             "dept": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "tech": "bugs", "sales": "buying"}}}
STATE = "My invoice was charged twice this month, please help."
STATES = [STATE, "The printer shows an error again.", "Can I buy ten more seats?"]


@pytest.fixture(scope="module")
def agents(bundles, checkpoints):
    return (edge_agent(bundles["modernbert-tiny"]),
            torch_agent(checkpoints["modernbert-tiny"]))


def both(agents, call):
    ours, theirs = agents
    return outcome(lambda: call(ours)), outcome(lambda: call(theirs))


CASES = {
    "max_len float": (lambda a: a.system_one(STATE, QUESTIONS, max_len=100.5), "max_len"),
    "max_len str": (lambda a: a.system_one(STATE, QUESTIONS, max_len="abc"), "max_len"),
    "max_len integral float": (lambda a: a.system_one(STATE, QUESTIONS, max_len=100.0), "max_len"),
    "head_max_len str": (lambda a: a.system_one(STATE, QUESTIONS, head_max_len="abc"),
                         "head_max_len"),
    "head_max_len float reaching a slice": (
        lambda a: a.system_one(STATE, QUESTIONS, head_max_len=300.5), "head_max_len"),
    "batch_size float": (lambda a: a.predict_batch(STATES, QUESTIONS, batch_size=1.5),
                         "batch_size"),
    "batch_size str": (lambda a: a.predict_batch(STATES, QUESTIONS, batch_size="2"),
                       "batch_size"),
    "lang int": (lambda a: a.system_one(STATE, QUESTIONS, lang=5), "lang"),
    "lang list": (lambda a: a.system_one(STATE, QUESTIONS, lang=["en"]), "lang"),
    "lang bytes": (lambda a: a.system_one(STATE, QUESTIONS, lang=b"en"), "lang"),
    "predict_long lang int": (lambda a: a.predict_long(STATE, QUESTIONS, lang=5), "lang"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_control_upstream_fails_on_is_refused_with_its_type_naming_the_argument(agents, case):
    call, argument = CASES[case]
    ours, theirs = both(agents, call)
    assert theirs[0] == "error", f"upstream answers {case}; the rule is to answer it too"
    assert ours[0] == "error"
    assert issubclass(ours[1], theirs[1]), (ours[1], theirs[1])
    assert ours[2].startswith(f"{argument} must be "), ours[2]
    assert theirs[2] != ours[2]  # upstream's own message names no argument


WARNED = {
    "batch_size 0": (lambda a: a.predict_batch(STATES, QUESTIONS, batch_size=0), "batch_size=0"),
    "batch_size -1": (lambda a: a.predict_batch(STATES, QUESTIONS, batch_size=-1),
                      "batch_size=-1"),
    "head_max_len tiny float": (lambda a: a.predict_batch(STATES, QUESTIONS, head_max_len=5.5),
                                "head_max_len=5.5"),
    "lang 0": (lambda a: a.predict_batch(STATES, QUESTIONS, lang=0), "lang=0"),
}


@pytest.mark.parametrize("case", sorted(WARNED))
def test_a_control_upstream_answers_is_answered_the_same_with_a_warning(agents, case):
    call, named = WARNED[case]
    ours, theirs = both(agents, call)
    assert ours[0] == theirs[0] == "ok"
    for mine, upstream in zip(ours[1], theirs[1]):
        assert_matches_torch(mine, upstream, case)
    assert [text for category, text in ours[2] if category is RuntimeWarning
            and text.startswith(named)], ours[2]


def test_good_controls_warn_about_nothing(agents):
    ours, _ = both(agents, lambda a: a.predict_batch(STATES, QUESTIONS, batch_size=2, lang="de",
                                                     max_len=256, head_max_len=128))
    assert ours[0] == "ok" and ours[2] == []


@pytest.mark.parametrize("value, expected", [(-1, 1), (0, 1), (1.5, 1), ("3", 3), (True, 1)])
def test_max_loaded_upstream_accepts_is_kept_with_a_warning(value, expected):
    import laya

    ours = outcome(lambda: laya_edge.Router(models={"english": "/nowhere"}, max_loaded=value))
    theirs = laya.Router(max_loaded=value)
    assert ours[0] == "ok" and ours[1].max_loaded == theirs.max_loaded == expected
    assert any(text.startswith(f"max_loaded={value!r}") for _, text in ours[2]), ours[2]


@pytest.mark.parametrize("value", [None, "many", [2]])
def test_max_loaded_upstream_refuses_is_refused_naming_it(value):
    import laya

    ours = outcome(lambda: laya_edge.Router(models={"english": "/nowhere"}, max_loaded=value))
    theirs = outcome(lambda: laya.Router(max_loaded=value))
    assert ours[0] == theirs[0] == "error" and ours[1] is theirs[1]
    assert ours[2].startswith("max_loaded must be a positive int")


def test_lang_error_is_also_what_upstream_raised():
    assert issubclass(LangTypeError, TypeError) and issubclass(LangTypeError, AttributeError)


def test_a_misspelt_question_key_is_ignored_as_upstream_does_with_a_warning(agents):
    misspelt = {"dept": dict(QUESTIONS["dept"], critera=QUESTIONS["dept"]["criteria"],
                             lables={"a": "b"})}
    ours, theirs = both(agents, lambda a: a.system_one(STATE, misspelt))
    assert ours[0] == theirs[0] == "ok"
    assert_matches_torch(ours[1], theirs[1])
    texts = [text for _, text in ours[2]]
    assert any("'critera'" in text and "did you mean 'criteria'?" in text for text in texts)
    assert any("'lables'" in text and "did you mean 'labels'?" in text for text in texts)
    assert not [text for _, text in theirs[2] if "critera" in text]


def test_instructions_cut_to_fit_head_max_len_answer_as_upstream_with_a_warning(agents):
    """Two questions that differ only past the cut get the same answer (upstream's payload,
    `truncated_questions` empty), and each is named in a warning with its dropped count."""
    base = "Is this message about a billing problem that needs a refund " * 30
    long = {"first": {"type": "noul", "instructions": base + "today?"},
            "second": {"type": "noul", "instructions": base + "next year, or never at all?"}}
    ours, theirs = both(agents, lambda a: a.system_one(STATE, long))
    assert ours[0] == theirs[0] == "ok"
    assert_matches_torch(ours[1], theirs[1])
    answers = ours[1]["answers"]
    assert answers["first"]["noul"] == answers["second"]["noul"]
    assert ours[1]["usage"]["truncated_questions"] == []
    ours_agent = agents[0]
    for qid, question in long.items():
        kept_room = ours_agent.head_max_len
        tokens = len(ours_agent.encoder.encode(f"noul question: {question['instructions']}"))
        dropped = [text for _, text in ours[2] if text.startswith(f"question {qid!r}: ")]
        assert len(dropped) == 1, ours[2]
        count = int(dropped[0].split(": ")[1].split()[0])
        assert 0 < count < tokens and tokens - count < kept_room
    short = outcome(lambda: ours_agent.system_one(STATE, QUESTIONS))
    assert short[2] == []


def test_a_row_past_the_position_table_is_refused_before_any_run(bundles, checkpoints):
    """MiniLM has 512 learned positions: upstream fails inside torch, the old runtime inside
    onnxruntime; now a ValueError names max_len. A max_len above the table with a state that
    stays inside it is answered, as upstream answers it."""
    ours = edge_agent(bundles["minilm"])
    theirs = torch_agent(checkpoints["minilm"])
    long_state = "word " * 2000
    refused = outcome(lambda: ours.system_one(long_state, QUESTIONS, max_len=600))
    upstream = outcome(lambda: theirs.system_one(long_state, QUESTIONS, max_len=600))
    assert upstream[0] == "error" and refused[0] == "error" and refused[1] is ValueError
    assert "max_len=600" in refused[2] and "512 positions" in refused[2]
    ran = []
    original = ours.session.run
    ours.session.run = lambda *args, **kwargs: ran.append(1) or original(*args, **kwargs)
    try:
        outcome(lambda: ours.system_one(long_state, QUESTIONS, max_len=600))
        assert ran == []
        answered = ours.system_one(STATE, QUESTIONS, max_len=600)
        assert ran
    finally:
        del ours.session.run
    assert_matches_torch(answered, theirs.system_one(STATE, QUESTIONS, max_len=600))


def test_the_manifest_records_the_position_table_only_where_there_is_one(bundles, checkpoints):
    for kind, bundle in bundles.items():
        graph = json.loads((bundle / "laya_edge.json").read_text())["graph"]
        encoder = json.loads((checkpoints[kind] / "encoder" / "config.json").read_text())
        learned = encoder.get("model_type") == "bert"
        assert graph.get("max_positions") == (encoder["max_position_embeddings"] if learned
                                              else None), kind


def test_answers_say_which_bundle_gave_them(bundles, tmp_path):
    """An agent attached under a built-in name keeps upstream's `repo` (the registered name)
    and reports its real bundle, revision and manifest digest in `routing.source`."""
    copy = tmp_path / "my-bundle"
    shutil.copytree(bundles["modernbert-tiny"], copy)
    agent = edge_agent(copy)
    router = laya_edge.Router()
    router.attach("english", agent)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        single = router.predict(STATE, QUESTIONS)
        batch = router.predict_batch([{"state": STATE, "questions": QUESTIONS}])
    from laya_edge.bundle_format import sha256_file
    from laya_edge.model_names import DEFAULT_MODELS, display

    expected = {"path": str(copy.resolve()), "revision": None,
                "manifest_sha256": sha256_file(copy / "laya_edge.json"),
                "created": json.loads((copy / "laya_edge.json").read_text())["created"]}
    assert single["routing"]["source"] == batch[0]["routing"]["source"] == expected
    assert agent.runtime_info()["source"] == expected
    assert single["routing"]["repo"] == display(DEFAULT_MODELS["english"])


def test_serve_model_bundle_answers_name_that_bundle(bundles):
    """`laya-edge serve --model ./bundle` used to answer `routing.repo: convaiinnovations/laya`."""
    from laya_edge.cli import serving_router

    bundle = str(bundles["modernbert-tiny"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        router = serving_router(bundle, None, None, [])()
        answers = [router.predict(state, QUESTIONS) for state in (STATE, "Wo ist meine Rechnung?")]
    assert {answer["routing"]["model"] for answer in answers} == {"english", "multilingual"}
    for answer in answers:
        assert answer["routing"]["repo"] == bundle
        assert answer["routing"]["source"]["path"] == str(bundles["modernbert-tiny"].resolve())
