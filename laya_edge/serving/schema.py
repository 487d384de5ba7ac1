"""The HTTP service's request bodies as pydantic models: every field error names the field and
the type it takes, and the same models are published as the service's OpenAPI document.

Types are strict where upstream laya's server refuses a value (a string `max_len`, a number
`lang`) and as loose as upstream where it answers (a state may be any JSON value but null).
Questions are checked here only for their outer shape, an object of objects: what a definition
must hold is `laya_edge.questions.check_question`'s to say.
"""
from __future__ import annotations

from typing import Annotated, Any, Callable, Dict, List, Optional, Sequence, Tuple, Type, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator
from pydantic_core import PydanticCustomError

MAX_SHOWN_ERRORS = 5
JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"),
              (str, "string"), (list, "array"), (dict, "object"))


class SchemaError(ValueError):
    """A body the schema refuses; the message names each offending field."""


def one_error(expected: str) -> WrapValidator:
    """Report a value no member of a union takes as one error naming `expected`, instead of
    one error per member."""
    def validate(value: Any, handler: Callable[[Any], Any]) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError("value_type", "Input should be {expected}",
                                      {"expected": expected}) from None
    return WrapValidator(validate)


State = Annotated[Union[str, int, float, bool, Dict[str, Any], List[Any]],
                  one_error("a string, number, boolean, object or array")]
Threshold = Annotated[Union[float, Dict[str, float]],
                      one_error("a number in [0, 1], or an object of bucket -> number")]
Questions = Annotated[Dict[str, Dict[str, Any]], Field(
    min_length=1, description="question id -> definition ({type, instructions, criteria, "
                              "labels, option_order}), as Router.predict takes them")]


class Controls(BaseModel):
    """What a request may set besides its input, with the meaning they have on Router.predict."""

    model_config = ConfigDict(extra="forbid", strict=True)

    model: Optional[str] = Field(None, description="a checkpoint name or alias; omitted: routed")
    task: Optional[str] = Field(None, description="a task name, e.g. typed-decisions")
    lang: Optional[str] = Field(None, description="the state's language code, e.g. de")
    lang_guess: Optional[str] = Field(None, description="a language hint routing may overrule")
    max_len: Optional[int] = Field(None, gt=0, description="token budget of a sequence")
    head_max_len: Optional[int] = Field(None, gt=0, description="token budget of a question")
    min_confidence: Optional[Threshold] = Field(None, description="abstain below this confidence")

    def controls(self) -> Dict[str, Any]:
        """The controls the request set, as keyword arguments of Router.predict."""
        return self.model_dump(include=set(Controls.model_fields), exclude_none=True)


class SystemOneRequest(Controls):
    """`POST /v1/systemone`: one state, its questions, and controls."""

    state: State = Field(description="the input; an object or array is read as its JSON text")
    questions: Questions


class BatchRequest(Controls):
    """`POST /v1/systemone/batch`: many states sharing one question set and one set of controls."""

    states: List[State] = Field(min_length=1, description="the inputs, answered in order")
    questions: Questions


class ErrorBody(BaseModel):
    """Every error answer."""

    detail: str


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for messages that must not echo the value."""
    return next((name for kind, name in JSON_TYPES if isinstance(value, kind)), "value")


def field_path(location: Sequence[Any]) -> str:
    """`questions['dept']`, `states[1]`: where in the body an error is."""
    head, *rest = location
    return str(head) + "".join(f"[{part!r}]" for part in rest)


def describe(error: Dict[str, Any]) -> str:
    """One line: the field, what it takes, and the JSON type it got (never the value)."""
    message = f"{field_path(error['loc'])}: {error['msg']}"
    if error["type"].endswith("_type"):
        message += f", got {json_type(error['input'])}"
    return message


def validate(model: Type[BaseModel], body: Dict[str, Any]) -> Any:
    """`body` as a `model`, or SchemaError naming every field it refuses (unknown ones first)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
    unknown = [repr(str(e["loc"][0])) for e in errors if e["type"] == "extra_forbidden"]
    inputs = [name for name in model.model_fields if name not in Controls.model_fields]
    lines = [f"unknown field(s) {', '.join(unknown)}; a body takes "
             f"{', '.join(inputs + list(Controls.model_fields))}"] if unknown else []
    lines += [describe(e) for e in errors if e["type"] != "extra_forbidden"]
    shown = "; ".join(lines[:MAX_SHOWN_ERRORS])
    more = len(lines) - MAX_SHOWN_ERRORS
    raise SchemaError(shown + (f"; and {more} more" if more > 0 else ""))


Operation = Tuple[str, str, str, Optional[Type[BaseModel]]]


def openapi_document(title: str, version: str, operations: Sequence[Operation]) -> Dict[str, Any]:
    """An OpenAPI 3.1 document of `operations` (method, path, summary, body model or None), the
    request bodies taken from the models themselves."""
    components = {"ErrorBody": ErrorBody.model_json_schema()}
    paths: Dict[str, Dict[str, Any]] = {}
    for method, path, summary, body in operations:
        operation: Dict[str, Any] = {"summary": summary, "responses": {
            "200": {"description": "the answer"},
            "default": {"description": "an error",
                        "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/ErrorBody"}}}}}}
        if body is not None:
            schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
            components.update(schema.pop("$defs", {}))
            components[body.__name__] = schema
            operation["requestBody"] = {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{body.__name__}"}}}}
        paths.setdefault(path, {})[method.lower()] = operation
    return {"openapi": "3.1.0", "info": {"title": title, "version": version}, "paths": paths,
            "components": {"schemas": components}}
