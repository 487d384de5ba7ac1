"""HTTP bodies, fuzzed against a real server: JSON of any shape, a wrong type in every field, huge
and deeply nested values, bytes that are not UTF-8 or not JSON. The only outcomes allowed are an
answer (200) or a 4xx whose detail names what is wrong; never a 500, a hang, or Python's own
words. Run with `--hypothesis-show-statistics` to see how many examples each strategy ran."""
import json

import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from laya_edge.serving.http import Limits
from test_serve import make_router, serving

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FUZZ = settings(max_examples=30, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
PER_FIELD = settings(FUZZ, max_examples=6)
# one value of each JSON type, tried in every field besides the generated ones
EVERY_TYPE = (None, True, 7, 2.5, "abc", [1], {"a": 1})
LIMITS = Limits(max_body_bytes=64 * 1024, max_state_chars=4000)
NOUL = {"q": {"type": "noul", "instructions": "Is it urgent?"}}
VALID = {"state": "My invoice is wrong.", "questions": NOUL}
FIELDS = ("state", "questions", "model", "task", "lang", "lang_guess", "max_len", "head_max_len",
          "min_confidence")
# what the detail of a refusal may name, per field (a task names the checkpoint it routes to)
NAMES = dict({field: (field,) for field in FIELDS}, task=("task", "model"),
             questions=("questions", "question"), state=("state", "lone surrogate"))
PYTHON_WORDS = ("Traceback", "NoneType", "unsupported operand", "object has no attribute",
                "not subscriptable", "positional argument", "codec can't", "inference failed")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**40, 10**40),
                    st.floats(allow_nan=False), st.text(max_size=30), st.just("\ud800"))
any_json = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=25)
# one branch per JSON type, so every field meets every type within a few examples
field_values = st.one_of(st.none(), st.booleans(), st.integers(-10**40, 10**40), st.floats(),
                         st.text(max_size=30), st.lists(scalars, max_size=3),
                         st.dictionaries(st.text(max_size=8), scalars, max_size=3),
                         st.sampled_from([
    "", "english", "multilingual", "typed-decisions", "de", "xx-YY", 1, 64, 10**6, 0.5, -1,
    {"default": 0.5}, {"choice:3-5": 2}, [], {}]))


def deep(depth):
    return ("[" * depth + "]" * depth).encode()


huge = st.one_of(
    st.integers(1, 20_000).map(lambda n: json.dumps(dict(VALID, state="word " * n)).encode()),
    st.integers(1, 100).map(lambda n: json.dumps(dict(VALID, questions={
        f"q{i}": NOUL["q"] for i in range(n)})).encode()),
    st.integers(1, 5_000).map(lambda depth: b'{"state": ' + deep(depth) + b', "questions": '
                              + json.dumps(NOUL).encode() + b"}"),
    st.integers(1, 6_000).map(lambda digits: b'{"state": "x", "questions": {}, "max_len": '
                              + b"7" * digits + b"}"),
    st.integers(1, 200).map(lambda n: json.dumps({"states": ["x"] * n,
                                                  "questions": NOUL}).encode()))


@pytest.fixture(scope="module")
def url(bundles):
    """Every model the Router lists can load, so no request is the server's failure (503)."""
    router = make_router(bundles)
    router.register("typed-decisions", str(bundles["modernbert-tiny"]))
    with serving(router, limits=LIMITS) as base:
        yield base


def post(url, content, path="/v1/systemone"):
    if not isinstance(content, bytes):
        content = json.dumps(content).encode("utf-8", "surrogatepass")
    return httpx.post(f"{url}{path}", content=content, timeout=30,
                      headers={"content-type": "application/json"})


def check(response, names=()):
    """An answer, or a 4xx with a detail in words that names one of `names` (when given)."""
    if response.status_code == 200:
        body = response.json()
        assert "answers" in body or "results" in body
        return
    assert 400 <= response.status_code < 500, (response.status_code, response.text)
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail, response.text
    assert not any(word in detail for word in PYTHON_WORDS), detail
    assert not names or any(name in detail for name in names), (names, detail)


@FUZZ
@given(body=any_json)
def test_json_of_any_shape(url, body):
    check(post(url, body))


def with_every_type(test):
    for value in EVERY_TYPE:
        test = example(value=value, path="/v1/systemone")(test)
    return test


@pytest.mark.parametrize("field", FIELDS)
@PER_FIELD
@given(value=field_values, path=st.sampled_from(["/v1/systemone", "/v1/systemone/batch"]))
@with_every_type
def test_any_value_in_any_field(url, field, value, path):
    body = dict(VALID, **{field: value})
    if path.endswith("batch"):
        body["states"] = [body.pop("state")]
    response = post(url, body, path)
    check(response, NAMES[field] + ("states",) if response.status_code == 422 else ())


@FUZZ
@given(definition=st.dictionaries(st.sampled_from(
    ["type", "instructions", "criteria", "labels", "option_order", "critera", "lables", "typ"]),
    st.one_of(any_json, st.sampled_from(["noul", "choice", "score"])), max_size=5))
def test_any_question_definition(url, definition):
    response = post(url, dict(VALID, questions={"q": definition}))
    check(response, ("question",))
    for warning in response.headers.get_list("x-laya-warning"):
        assert warning.isascii() and "did you mean" in warning


@FUZZ
@given(content=huge)
def test_huge_and_deeply_nested_bodies(url, content):
    check(post(url, content, "/v1/systemone/batch" if content.startswith(b'{"states"')
               else "/v1/systemone"))


@FUZZ
@given(content=st.one_of(st.binary(max_size=200),
                         st.binary(max_size=50).map(lambda b: b'{"state": "' + b + b'"}'),
                         st.text(max_size=50).map(lambda t: t.encode("utf-16"))))
def test_bytes_that_are_not_utf8_json(url, content):
    check(post(url, content), ("request body", "state", "questions"))
