"""Bad input, fuzzed: whatever a caller passes, `system_one`/`predict_batch` either answer with a
payload of the right shape or raise TypeError/ValueError with a message, before any inference;
never an error from inside onnxruntime, numpy or the tokenizer."""
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import laya_edge

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

MASK = "[MASK]"
FUZZ = settings(max_examples=80, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=40), st.just(MASK), st.just("\ud800"),
                    st.binary(max_size=20).map(lambda b: b + b"\xff"))
json_like = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=20)
states = st.one_of(json_like, st.text(max_size=3000),
                   st.builds(lambda word, n: " ".join([word] * n),
                             st.sampled_from(["refund", MASK, "é", "注文"]),
                             st.integers(1, 3000)))
criteria = st.one_of(scalars, st.lists(scalars, max_size=6),
                     st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), scalars,
                                     max_size=6))
question = st.one_of(
    scalars,
    st.fixed_dictionaries({},
                          optional={"type": st.one_of(st.sampled_from(
                                        ["choice", "score", "noul", "rank"]), scalars),
                                    "instructions": st.one_of(scalars, json_like),
                                    "criteria": criteria,
                                    "option_order": st.lists(st.integers(-2, 8), max_size=6),
                                    "extra": scalars}))
questions = st.one_of(scalars, st.lists(question, max_size=3),
                      st.dictionaries(st.one_of(st.text(max_size=10), st.integers()), question,
                                      max_size=5))


@pytest.fixture(scope="module")
def agent(bundles):
    return laya_edge.ONNXAgent(str(bundles["modernbert-tiny"]))


def check_payload(payload, asked):
    """A payload answers exactly the questions asked, each in its type's shape."""
    assert list(payload["answers"]) == list(asked)
    if not asked:
        assert payload["usage"] == {"input_tokens": 0, "output_tokens": 0}
        return
    for qid, answer in payload["answers"].items():
        kind = answer["type"]
        assert kind == asked[qid]["type"]
        if kind == "noul":
            assert 0.0 <= answer["noul"] <= 1.0
        else:
            probabilities = answer["probabilities"]
            assert all(0.0 <= p <= 1.0 for p in probabilities.values())
            assert math.isclose(sum(probabilities.values()), 1.0, abs_tol=1e-3)
        assert 0.0 <= answer["answer_confidence"] <= 1.0
    assert payload["usage"]["input_tokens"] > 0


def answer_or_refuse(call, asked):
    try:
        payload = call()
    except (TypeError, ValueError) as exc:
        assert str(exc).strip(), "an error without a message"
        return None
    check_payload(payload, asked)
    return payload


def run_counted(check, **strategies) -> int:
    """Run `check` on FUZZ's examples of `strategies`; how many ran (the count is printed, and
    must be most of FUZZ's budget: a strategy that filters away its own examples proves little)."""
    ran = [0]

    @FUZZ
    @given(**strategies)
    def counted(**values):
        ran[0] += 1
        check(**values)

    counted()
    print(f"{check.__name__}: {ran[0]} examples")
    assert ran[0] >= FUZZ.max_examples // 2
    return ran[0]


def test_any_state_and_questions(agent):
    def state_and_questions(state, asked):
        answer_or_refuse(lambda: agent.system_one(state, asked), asked)

    run_counted(state_and_questions, state=states, asked=questions)


def test_any_questions_in_a_batch(agent):
    def questions_in_a_batch(state, asked):
        try:
            results = agent.predict_batch([state, state], asked)
        except (TypeError, ValueError) as exc:
            assert str(exc).strip()
            return
        for payload in results:
            check_payload(payload, asked)

    run_counted(questions_in_a_batch, state=st.text(max_size=200), asked=questions)


CONTROL_NAMES = ("max_len", "head_max_len", "batch_size", "lang", "sort_by_length",
                 "min_confidence")
control_values = st.one_of(scalars, st.integers(-5, 3000), st.lists(scalars, max_size=2),
                           st.dictionaries(st.text(max_size=8), scalars, max_size=2))
controls = st.fixed_dictionaries({}, optional={name: control_values for name in CONTROL_NAMES})
ASKED = {"urgent": {"type": "noul", "instructions": "Is this urgent?"},
         "dept": {"type": "choice", "instructions": "Which team?",
                  "criteria": {"billing": "money", "tech": "bugs"}}}


def test_any_controls(agent):
    """Any value in any control: an answer, or a TypeError/ValueError naming a control it was
    given (never a message from inside Python, numpy or onnxruntime)."""
    def any_control_values(state, options):
        try:
            results = agent.predict_batch([state, "second state"], ASKED, **options)
        except (TypeError, ValueError) as exc:
            named = [name for name in options if name in str(exc)]
            assert named, f"{type(exc).__name__}: {exc} names none of {sorted(options)}"
            return
        for payload in results:
            check_payload(payload, ASKED)

    run_counted(any_control_values, state=st.text(max_size=300), options=controls)


NOUL = {"type": "noul", "instructions": "Is this urgent?"}


@pytest.mark.parametrize("state", [
    "x " * 500_000,                              # a megabyte
    {"a": [1.5, float("nan"), float("inf"), -float("inf")]},
    MASK * 2000,
    "",
])
def test_extreme_states_answer_within_the_budget(agent, state):
    payload = agent.system_one(state, {"q": NOUL})
    check_payload(payload, {"q": NOUL})
    usage = payload["usage"]
    assert usage["input_tokens"] <= agent.max_len
    if isinstance(state, str) and len(state) > 100_000:
        assert usage["truncated"] and usage["state_tokens_dropped"] > 0


def test_deeply_nested_state_is_a_value_error(agent):
    state = []
    for _ in range(100_000):
        state = [state]
    with pytest.raises(ValueError, match="nested"):
        agent.system_one(state, {"q": NOUL})


@pytest.mark.parametrize("state", [b"\xff\xfe bytes", object(), {1, 2}])
def test_unserialisable_states_are_type_errors(agent, state):
    with pytest.raises(TypeError):
        agent.system_one(state, {"q": NOUL})


def test_lone_surrogates_are_named_before_the_tokenizer_sees_them(agent):
    with pytest.raises(TypeError, match=r"state 1 contains a lone surrogate '\\udc00' at index 5"):
        agent.predict_batch(["fine", "lone \udc00 surrogate"], {"q": NOUL})
    bad = {"q": dict(NOUL, instructions="Is \ud800 urgent?")}
    with pytest.raises(TypeError, match=r"question 'q' contains a lone surrogate"):
        agent.system_one("fine", bad)


def test_a_thousand_options_and_a_hundred_questions(agent):
    wide = {"type": "choice", "instructions": "Pick one.",
            "criteria": [f"option {i}" for i in range(1000)]}
    payload = answer_or_refuse(lambda: agent.system_one("pick", {"wide": wide}), {"wide": wide})
    if payload is not None:
        assert len(payload["answers"]["wide"]["probabilities"]) == 1000
    many = {f"q{i}": dict(NOUL, instructions=f"Statement {i} holds.") for i in range(100)}
    check_payload(agent.system_one("ticket text", many), many)
