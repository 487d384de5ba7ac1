"""Request bodies against their schema, on a real server: every field error is a 422 naming the
field and the type it takes, values upstream's server answers are answered, unknown question keys
come back as warning headers, and /openapi.json publishes the schema the server enforces."""
import httpx
import jsonschema
import pytest

import laya_edge
from laya_edge.questions import unknown_key_warnings
from laya_edge.serving.http import MAX_WARNING_HEADERS
from test_serve import QUESTIONS, STATES, as_json, make_router, serving, without_jev

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NOUL = {"q": {"type": "noul", "instructions": "Is it urgent?"}}
RAW_PYTHON = ("unsupported operand", "NoneType", "Traceback", "object has no attribute")


@pytest.fixture(scope="module")
def url(bundles):
    with serving(make_router(bundles)) as base:
        yield base


def refused(response, *fragments):
    """A 422 whose detail holds every fragment and no Python internals."""
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert all(fragment in detail for fragment in fragments), detail
    assert not any(text in detail for text in RAW_PYTHON), detail
    return detail


@pytest.mark.parametrize("extra, fragments", [
    ({"max_len": "abc"}, ("max_len: Input should be a valid integer, got string",)),
    ({"max_len": 12.5}, ("max_len: Input should be a valid integer, got number",)),
    ({"max_len": True}, ("max_len: Input should be a valid integer, got boolean",)),
    ({"max_len": 0}, ("max_len: Input should be greater than 0",)),
    ({"head_max_len": [64]}, ("head_max_len: Input should be a valid integer, got array",)),
    ({"lang": 5}, ("lang: Input should be a valid string, got integer",)),
    ({"lang_guess": 5}, ("lang_guess: Input should be a valid string, got integer",)),
    ({"model": 5}, ("model: Input should be a valid string, got integer",)),
    ({"task": {"name": "typed"}}, ("task: Input should be a valid string, got object",)),
    ({"min_confidence": "0.5"}, ("min_confidence: Input should be a number in [0, 1]",
                                 "got string")),
    ({"state": None}, ("state: Input should be a string, number, boolean, object or array",
                       "got null")),
    ({"questions": []}, ("questions: Input should be a valid dictionary, got array",)),
    ({"questions": {}}, ("questions: Dictionary should have at least 1 item",)),
    ({"questions": {"q": "Is it urgent?"}}, ("questions['q']: Input should be a valid "
                                             "dictionary, got string",)),
    ({"hooks": ["x"], "lang": 5}, ("unknown field(s) 'hooks'; a body takes state, questions, "
                                   "model", "lang: Input should be a valid string")),
])
def test_a_wrong_field_is_a_422_naming_it_and_its_type(url, extra, fragments):
    refused(httpx.post(f"{url}/v1/systemone", json=dict({"state": "x", "questions": NOUL},
                                                        **extra)), *fragments)


def test_a_missing_field_is_named(url):
    refused(httpx.post(f"{url}/v1/systemone", json={"questions": NOUL}), "state: Field required")
    refused(httpx.post(f"{url}/v1/systemone/batch", json={"states": ["x"]}),
            "questions: Field required")


@pytest.mark.parametrize("states, fragment", [
    (["fine", None], "states[1]: Input should be a string, number, boolean, object or array, "
                     "got null"),
    ("one state", "states: Input should be a valid list, got string"),
    ([], "states: List should have at least 1 item"),
])
def test_a_bad_batch_names_the_state(url, states, fragment):
    refused(httpx.post(f"{url}/v1/systemone/batch", json={"states": states, "questions": NOUL}),
            fragment)


def test_many_errors_are_cut_to_a_few(url):
    detail = refused(httpx.post(f"{url}/v1/systemone/batch",
                                json={"states": [None] * 40, "questions": NOUL}),
                     "states[0]", "states[4]", "and 35 more")
    assert "states[5]" not in detail


@pytest.mark.parametrize("state", [5, 2.5, True, {"order": 17, "items": ["a"]}, ["a", 1]])
def test_any_json_state_upstream_answers_is_answered_as_the_router(url, bundles, state):
    response = httpx.post(f"{url}/v1/systemone", json={"state": state, "questions": QUESTIONS})
    assert response.status_code == 200, response.text
    assert without_jev(response.json()) == as_json(make_router(bundles).predict(state, QUESTIONS))


def test_max_len_over_the_server_limit_is_422(url):
    refused(httpx.post(f"{url}/v1/systemone", json={"state": "word " * 9000, "questions": NOUL,
                                                     "max_len": 100000}),
            "max_len exceeds server limit (100000 > 8192)")


def test_max_len_past_the_models_positions_is_422(bundles):
    """Under the server's cap, the model's own limit answers: MiniLM has 512 learned positions,
    so a row of 600 tokens is a ValueError naming max_len before inference, passed on as a 422
    (it was a 500 from inside onnxruntime)."""
    minilm = str(bundles["minilm"])
    router = laya_edge.Router(models={"english": minilm, "multilingual": minilm})
    with serving(router) as base:
        response = httpx.post(f"{base}/v1/systemone", json={
            "state": "word " * 2000, "questions": NOUL, "max_len": 600}, timeout=60)
    refused(response, "max_len=600", "512 positions")


def test_a_router_value_error_is_a_422_with_its_message(url):
    refused(httpx.post(f"{url}/v1/systemone", json={"state": "x", "questions": NOUL,
                                                     "min_confidence": {"choice:7": 0.5}}),
            "min_confidence map keys must be a bucket like 'choice:3-5' or 'default'")


@pytest.mark.parametrize("path, body", [
    ("/v1/systemone", {"state": STATES[0]}),
    ("/v1/systemone/batch", {"states": STATES[:2]}),
])
def test_an_unknown_question_key_is_a_warning_header_and_the_body_is_unchanged(
        url, bundles, path, body):
    misspelt = dict(QUESTIONS, dept=dict(QUESTIONS["dept"], critera=["x"]),
                    urgent=dict(QUESTIONS["urgent"], lables={"true": "yes"}))
    response = httpx.post(f"{url}{path}", json=dict(body, questions=misspelt))
    assert response.status_code == 200, response.text
    values = response.headers.get_list("x-laya-warning")
    assert values == unknown_key_warnings(misspelt) and len(values) == 2
    assert "'critera'" in values[0] and "'lables'" in values[1]
    answers = response.json()["results"] if "states" in body else [response.json()]
    router = make_router(bundles)
    states = body.get("states", [body.get("state")])
    expected = [router.predict(state, misspelt) for state in states]
    assert [without_jev(answer) for answer in answers] == as_json(expected)


def test_warning_headers_are_ascii_and_bounded(url):
    questions = {f"frage-é-{i}": {"type": "noul", "instructions": "x", "crit\u00e8re": 1}
                 for i in range(MAX_WARNING_HEADERS + 3)}
    response = httpx.post(f"{url}/v1/systemone", json={"state": "x", "questions": questions})
    assert response.status_code == 200, response.text
    values = response.headers.get_list("x-laya-warning")
    assert len(values) == MAX_WARNING_HEADERS + 1 and "3 more" in values[-1]
    assert all(value.isascii() for value in values)
    assert "'frage-\\xe9-0'" in values[0] and "'crit\\xe8re'" in values[0]
    assert "x-laya-warning" not in httpx.post(f"{url}/v1/systemone",
                                              json={"state": "x", "questions": NOUL}).headers


def request_schema(document, path):
    """The published JSON schema of a route's body, with the document's components to resolve
    its references."""
    operation = document["paths"][path]["post"]
    name = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return dict(document["components"]["schemas"][name.rsplit("/", 1)[1]],
                components=document["components"])


def test_openapi_document_lists_every_route(url):
    document = httpx.get(f"{url}/openapi.json").json()
    assert document["openapi"].startswith("3.")
    assert {(path, method) for path, ops in document["paths"].items() for method in ops} == {
        ("/health/live", "get"), ("/health/ready", "get"), ("/health", "get"),
        ("/openapi.json", "get"), ("/metrics", "get"), ("/v1/systemone", "post"),
        ("/v1/systemone/batch", "post")}
    for path, ops in document["paths"].items():
        assert httpx.request(next(iter(ops)).upper(), f"{url}{path}").status_code != 404


@pytest.mark.parametrize("body", [
    {"state": "x", "questions": NOUL},
    {"state": {"a": [1]}, "questions": NOUL, "max_len": 64, "lang": "de", "min_confidence": 0.5},
    {"state": "x", "questions": NOUL, "min_confidence": {"default": 0.5}},
    {"state": "x", "questions": NOUL, "max_len": "64"},
    {"state": "x", "questions": NOUL, "max_len": 0},
    {"state": None, "questions": NOUL},
    {"state": "x", "questions": {}},
    {"state": "x", "questions": {"q": 1}},
    {"state": "x", "questions": NOUL, "lang_guess": 5},
    {"state": "x", "questions": NOUL, "temperature": 1},
    {"questions": NOUL},
])
def test_the_published_schema_is_the_one_the_server_enforces(url, body):
    """A body the published schema accepts passes the server's schema check, and one it refuses
    is the server's 422."""
    schema = request_schema(httpx.get(f"{url}/openapi.json").json(), "/v1/systemone")
    jsonschema.Draft202012Validator.check_schema(schema)
    published_ok = jsonschema.Draft202012Validator(schema).is_valid(body)
    response = httpx.post(f"{url}/v1/systemone", json=body)
    assert (response.status_code == 200) is published_ok, response.text


def test_openapi_needs_the_token_when_auth_is_on(bundles):
    with serving(make_router(bundles), api_key="s3cret") as base:
        anonymous = httpx.get(f"{base}/openapi.json")
        with_token = httpx.get(f"{base}/openapi.json", headers={"Authorization": "Bearer s3cret"})
    assert anonymous.status_code == 401
    assert with_token.status_code == 200 and "/v1/systemone" in with_token.json()["paths"]
