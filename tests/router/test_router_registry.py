"""The Router's registry and construction against upstream laya 0.4.15: names, aliases,
built-ins, agent_kwargs, digests (docs/design/routing.md#checkpoints)."""
from __future__ import annotations

import inspect
import json
import warnings
from typing import Any, Callable

import pytest

import laya.router as UR

import laya_edge.router as ER

from router_support import (SOURCES, DE1, EN1, JA1, Q1, SIDES, Side, assert_parity, both, plain)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ==============================================================================================
# Registry and construction (docs/design/routing.md#checkpoints)
# ==============================================================================================

def attempt(fn: Callable[[], Any]) -> Any:
    try:
        return plain(fn())
    except Exception as exc:  # noqa: BLE001 -- compared
        return plain(exc)


NAMES = ["english", " EN ", "Laya", "default", "multi", "ML", "laya-multilingual", "typed",
         "typed_decisions", "laya-typed-decisions", "decisions", "Typed-Decisions ", "papers", 5,
         None, "auto", ""]


def test_name_functions_match_upstream():
    for name in NAMES:
        assert ER.canonical_name(name) == UR.canonical_name(name)
        assert attempt(lambda: ER.normalise_name(name)) == attempt(lambda: UR.normalise_name(name))
        assert ER.resolve_model_spec(name) == UR.resolve_model_spec(name)
    assert attempt(lambda: ER.normalise_name("nope")) == (
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])")
    assert ER.resolve_model_spec("ml") == ("convaiinnovations/laya", "multilingual")
    assert ER.DEFAULT_MODELS == UR.DEFAULT_MODELS
    assert ER.STANDALONE_MODELS == UR.STANDALONE_MODELS
    workflows = list(ER.TYPED_DECISION_WORKFLOWS.values())
    for questions in [{k: {} for k in ids} for ids in workflows] + [
            {k: {} for k in reversed(sorted(workflows[0]))}, {k: {} for k in workflows[1] | {"x"}},
            {k: {} for k in list(workflows[2])[:-1]}, {}, None, {"urgency": {}}]:
        assert ER.match_typed_decisions_workflow(questions) == \
            UR.match_typed_decisions_workflow(questions)
    assert ER.match_typed_decisions_workflow({k: {} for k in reversed(sorted(workflows[3]))}) \
        == "security_incidents"
    for side_name in SIDES:
        router = (ER.Router if side_name == "edge" else UR.Router)(
            models={"papers": "/p"}, default="english")
        assert router.resolve(" Papers ") == "papers"
    assert attempt(lambda: ER.Router(models={"papers": "/p"}).resolve("nope")) == (
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', 'papers', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])")


def test_register_name_rules_warnings_and_rollback(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))

    def scenario(side):
        side.patch_builds()       # (re-pointing unloads: count gc passes instead of running them)
        router = side.router()
        out = []
        for name, source, description in [
                ("Papers", "/p", None), (" My.Model_2-x ", ("/repo", "sub"), "a fine-tune"),
                ("bad name", "/p", None), ("-lead", "/p", None), ("a/b", "/p", None),
                (5, "/p", None), ("auto", "/p", None), (" AUTO ", "/p", None),
                ("papers", 5, None), ("papers", {"a": 1}, None), ("englsh", "/p", None),
                ("enlgish", "/p", None), ("multilingal", "/p", None), ("englishh", "/p", None),
                ("englysh", "/p", None),
                ("typed-decision", "/p", None), ("ml", "/srv/ml", None),
                ("en", ["/srv/en"], None), ("home", "~/models/x", 42), ("short", ["/s"], None),
                ("typed", ("/srv/typed", "v2"), "re-pointed")]:
            out.append(attempt(lambda: router.register(name, source, description)))
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            out.append(attempt(lambda: router.register("englis", "/x", "dropped")))
        out.append(attempt(lambda: router.register("papers", "/p2", "changed")))
        out += [plain(router.models), plain(router.registered), plain(router.descriptions),
                router.route(EN1, model="short")["repo"], router.route(EN1, model="ml")["repo"]]
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    value = ours.value
    assert value[:2] == ["papers", "my.model_2-x"]
    assert value[2:8] == [
        "ValueError: invalid checkpoint name 'bad name': use lowercase letters, digits, '.', '_' "
        "or '-', starting with a letter or digit",
        "ValueError: invalid checkpoint name '-lead': use lowercase letters, digits, '.', '_' or "
        "'-', starting with a letter or digit",
        "ValueError: invalid checkpoint name 'a/b': use lowercase letters, digits, '.', '_' or "
        "'-', starting with a letter or digit",
        "ValueError: invalid checkpoint name 5: use lowercase letters, digits, '.', '_' or '-', "
        "starting with a letter or digit",
        "ValueError: invalid checkpoint name 'auto': 'auto' means automatic routing in every "
        "model= argument",
        "ValueError: invalid checkpoint name ' AUTO ': 'auto' means automatic routing in every "
        "model= argument"]
    assert value[8:10] == [
        "TypeError: checkpoint source for 'papers' must be a repo id, a local path or a (repo, "
        "subfolder) pair, got int",
        "TypeError: checkpoint source for 'papers' must be a repo id, a local path or a (repo, "
        "subfolder) pair, got dict"]
    assert value[10:21] == ["englsh", "enlgish", "multilingal", "englishh", "englysh",
                            "typed-decision", "multilingual", "english", "home", "short",
                            "typed-decisions"]
    assert value[21] == ("RuntimeWarning: laya: checkpoint name 'englis' is one edit from the "
                         "built-in 'english'; it is registered as a separate checkpoint and "
                         "'english' is unchanged.")
    models, registered, descriptions = value[23:26]
    assert "englis" not in models and "englis" not in descriptions   # rolled back
    assert models["home"] == str(tmp_path / "models" / "x")
    assert models["english"] == ["/srv/en"] and models["multilingual"] == "/srv/ml"
    assert registered["my.model_2-x"] == {"source": "/repo/sub", "description": "a fine-tune"}
    assert registered["home"]["description"] == "42"
    assert registered["papers"] == {"source": "/p2", "description": "changed"}
    assert "english" not in registered and "typed-decisions" not in registered
    assert value[26:] == ["/s", "/srv/ml"]
    warned = [w for w in ours.warnings if w[0] == "RuntimeWarning"]
    assert warned == [("RuntimeWarning", f"laya: checkpoint name {n!r} is one edit from the "
                       f"built-in {b!r}; it is registered as a separate checkpoint and {b!r} is "
                       "unchanged.") for n, b in [("englsh", "english"), ("enlgish", "english"),
                                                 ("multilingal", "multilingual"),
                                                 ("englishh", "english"), ("englysh", "english"),
                                                 ("typed-decision", "typed-decisions")]]


def test_constructor_models_and_unregister_errors(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models={"papers": "/p", "en": "/srv/en"}, default="papers",
                             hooks=[side.rec()])
        out = [attempt(lambda: router.unregister(name)) for name in
               ("english", "en", "papers", "nope")]
        router.register("notes", "/n", "notes")
        router.load("notes")
        router.revisions["notes"] = "abc"
        out.append(attempt(lambda: router.unregister("Notes")))
        out += [plain(router.models), plain(router.registered), plain(router.descriptions),
                router.revisions, router.loaded, attempt(lambda: router.load("notes"))]
        out.append(attempt(lambda: side.router(models={"bad name": "/x"})))
        out.append(attempt(lambda: side.router(default="nope")))
        out.append(attempt(lambda: side.router(models={"english": 3})))
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value[:4] == [
        "ValueError: 'english' is a built-in checkpoint and cannot be unregistered",
        "ValueError: 'english' is a built-in checkpoint and cannot be unregistered",
        "ValueError: 'papers' is this Router's default checkpoint; set another default before "
        "unregistering it",
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', 'papers', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', 'typed_decisions'])"]
    assert ours.value[4] is None
    assert "notes" not in ours.value[5] and "notes" not in ours.value[6]
    assert ours.value[8] == {} and ours.value[9] == []
    assert ours.value[10].startswith("ValueError: unknown model 'notes'")
    assert [(e["event"], e["model"]) for e in ours.trace] == [("on_load", "notes"),
                                                              ("on_evict", "notes")]


def test_attached_without_source_cannot_be_rebuilt(monkeypatch):
    def scenario(side):
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=1)
        router.attach("mine", side.agent("mine"))
        router.max_loaded = 1
        router.load("english")                   # evicts the attached agent
        out = [router.loaded, attempt(lambda: router.load("mine")),
               router.preload().loaded]          # preload skips names without a source
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value[1] == (
        "ValueError: checkpoint 'mine' has no source to load from: it was attached as a built "
        "Agent and is no longer resident; attach it again, or register a path or repo")
    assert ours.value[2] == ["english", "multilingual", "typed-decisions"]


def test_revisions_token_and_device_reach_the_build(monkeypatch):
    def scenario(side):
        side.patch_builds()
        monkeypatch.setenv("HF_TOKEN", "env-token")
        pinned = side.router(models=SOURCES, revision="r1", device="cpu", max_loaded=3,
                             revisions={"ml": "r2", "en": None, "typed": "  "})
        for name in ("english", "multilingual", "typed-decisions"):
            pinned.load(name)
        unpinned = side.router(models=SOURCES, revision="   ", token="explicit",
                               revisions={"ml": "r3"})
        unpinned.load("english")
        unpinned.load("ml")
        monkeypatch.delenv("HF_TOKEN")
        return [pinned.revisions, pinned.loaded_revisions, unpinned.loaded_revisions,
                attempt(lambda: side.router(revisions={"nope": "x"}))]

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.builds == [
        ("/srv/en", {"device": "cpu", "token": "env-token", "subfolder": None, "revision": "r1"}),
        ("/srv/bundle", {"device": "cpu", "token": "env-token", "subfolder": "multilingual",
                         "revision": "r2"}),
        ("/srv/typed", {"device": "cpu", "token": "env-token", "subfolder": None,
                        "revision": "r1"}),
        ("/srv/en", {"device": None, "token": "explicit", "subfolder": None}),
        ("/srv/bundle", {"device": None, "token": "explicit", "subfolder": "multilingual",
                         "revision": "r3"})]
    assert ours.value[1] == {"english": "r1", "multilingual": "r2", "typed-decisions": "r1"}
    assert ours.value[3].startswith("ValueError: unknown model 'nope'")


def test_agent_kwargs_validation_against_the_onnx_agent_signature(monkeypatch):
    from laya_edge.onnx_agent import ONNXAgent

    accepted = sorted(set(inspect.signature(ONNXAgent.__init__).parameters) - {"self"}
                      - ER.ROUTER_OWNED_AGENT_ARGS)
    assert attempt(lambda: ER.Router(agent_kwargs={"hooks": None, "device": "cpu",
                                                   "bogus": 1})) == (
        "ValueError: Router sets 'device', 'hooks' itself; pass them to Router(...) instead of "
        "in agent_kwargs")
    assert attempt(lambda: UR.Router(agent_kwargs={"hooks": None, "device": "cpu"})) == (
        "ValueError: Router sets 'device', 'hooks' itself; pass them to Router(...) instead of "
        "in agent_kwargs")
    for owned in sorted(ER.ROUTER_OWNED_AGENT_ARGS):
        assert attempt(lambda: ER.Router(agent_kwargs={owned: None})) == (
            f"ValueError: Router sets {owned!r} itself; pass them to Router(...) instead of in "
            "agent_kwargs")
    # laya_edge's Router also owns `precision` (Router(precision=...)); upstream has none
    assert ER.ROUTER_OWNED_AGENT_ARGS == UR._ROUTER_OWNED_AGENT_ARGS | {"precision"}
    assert attempt(lambda: ER.Router(agent_kwargs={"fast": True, "bogus": 1})) == (
        f"ValueError: ONNXAgent accepts none of 'bogus', 'fast'; it accepts {accepted}")
    # upstream checks its PyTorch Agent (which takes `fast`) and names it
    assert attempt(lambda: UR.Router(agent_kwargs={"fast": True, "bogus": 1})).startswith(
        "ValueError: Agent accepts none of 'bogus'; it accepts [")
    router = ER.Router(agent_kwargs={"intra_op_threads": 2, "onnx_path": "x.onnx"})
    assert router.agent_kwargs == {"intra_op_threads": 2, "onnx_path": "x.onnx"}
    assert ER.Router(agent_kwargs={}).agent_kwargs == {} and ER.Router.agent_kwargs == {}
    side = Side("edge", monkeypatch)
    side.patch_builds()
    router = ER.Router(models=SOURCES, agent_kwargs={"intra_op_threads": 2, "onnx_path": "m.onnx",
                                                     "lang_temperatures": {"de": None}})
    router.load("english")
    assert side.builds == [("/srv/en", {"device": None, "token": None, "subfolder": None,
                                        "intra_op_threads": 2, "onnx_path": "m.onnx",
                                        "lang_temperatures": {"de": None}})]


@pytest.mark.parametrize("env", [
    None, "", "not json", "[1, 2]", "{}", '{"laya.onnx": "abc", "tokenizer/tokenizer.json": "d"}',
    '{"en": {"laya.onnx": "1"}, "ml": {}}', '{"papers": {"x": "2"}, "EN": {"laya.onnx": "1"}}',
    '{"en": {"laya.onnx": "1"}, "tokenizer.json": "2"}', '{"en": {"a": "1"}, "ml": 3}',
    '{"nope": {"a": "1"}}'])
def test_sha256_digests_from_arguments_and_environment(monkeypatch, env):
    def scenario(side):
        if env is None:
            monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        else:
            monkeypatch.setenv("LAYA_SHA256_DIGESTS", env)
        out = [attempt(lambda: side.router(models={"papers": "/p"}).sha256_digests),
               attempt(lambda: side.router(models={"papers": "/p"}, sha256_digests={
                   "en": {"laya.onnx": "arg"}, "ml": None}).sha256_digests),
               attempt(lambda: side.router(sha256_digests={"zzz": {}}))]
        monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        late = side.router()
        if env is not None:
            monkeypatch.setenv("LAYA_SHA256_DIGESTS", env)
        out.append(attempt(lambda: late.register("papers", "/p")))
        out.append(attempt(lambda: late.register("other", "/o")))
        out.append(plain(late.sha256_digests))
        return out

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    if env == '{"en": {"laya.onnx": "1"}, "ml": {}}':
        assert ours.value[0] == {"english": {"laya.onnx": "1"}, "multilingual": {},
                                 "typed-decisions": {}, "papers": {}}
        assert ours.value[1] == {"english": {"laya.onnx": "arg"}, "multilingual": None,
                                 "typed-decisions": {}, "papers": {}}
        assert ours.value[5] == {"papers": {}, "other": {}}
    if env == '{"papers": {"x": "2"}, "EN": {"laya.onnx": "1"}}':
        assert ours.value[5] == {"papers": {"x": "2"}, "other": {}}
    if env and env.startswith('{"laya.onnx"'):        # flat: not a Router layer
        assert ours.value[0] == {} and ours.value[5] == {}
    if env in ('{"en": {"laya.onnx": "1"}, "tokenizer.json": "2"}', '{"en": {"a": "1"}, "ml": 3}'):
        keys = sorted(json.loads(env))
        assert ours.value[0] == (
            "ValueError: LAYA_SHA256_DIGESTS must be either {artifact: digest} for every "
            "checkpoint or {model: {artifact: digest}} per checkpoint; "
            f"{keys} mixes the two or holds a value that is neither")
    if env in (None, "", "not json", "[1, 2]", "{}"):
        assert ours.value[0] == {} and ours.value[5] == {}
    if env is None or env.startswith('{"laya.onnx"'):
        assert ours.value[2].startswith("ValueError: unknown model 'zzz'")
    if env == '{"nope": {"a": "1"}}':        # a nested entry naming no checkpoint
        assert ours.value[0].startswith("ValueError: unknown model 'nope'")


def test_expected_sha256_is_merged_per_file_at_build_time(monkeypatch):
    def scenario(side):
        monkeypatch.delenv("LAYA_SHA256_DIGESTS", raising=False)
        side.patch_builds()
        router = side.router(models=SOURCES, max_loaded=3,
                             agent_kwargs={"expected_sha256": {"tok": "shared", "laya.onnx": "s"}},
                             sha256_digests={"english": {"laya.onnx": "own"},
                                             "multilingual": None})
        for name in ("english", "multilingual", "typed-decisions"):
            router.load(name)
        router.unload()
        router.sha256_digests["typed-decisions"] = "not-a-map"      # read at build time
        router.sha256_digests["english"]["extra"] = "added"
        router.load("typed")
        router.load("english")
        plain_router = side.router(models=SOURCES, sha256_digests={"ml": {"a": "1"}})
        plain_router.load("english")
        plain_router.load("ml")
        monkeypatch.setenv("LAYA_SHA256_DIGESTS", '{"ml": {"laya.onnx": "env"}}')
        env_router = side.router(models=SOURCES, max_loaded=3,
                                 agent_kwargs={"expected_sha256": {"laya.onnx": "shared"}})
        env_router.load("english")
        env_router.load("ml")
        return None

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [b[1].get("expected_sha256", "absent") for b in ours.builds] == [
        {"tok": "shared", "laya.onnx": "own"},                 # per-checkpoint entry wins
        {"tok": "shared", "laya.onnx": "s"},                   # None names no file
        {"tok": "shared", "laya.onnx": "s"},                   # no entry: the shared map
        "not-a-map",                                           # passed through for the agent
        {"tok": "shared", "laya.onnx": "own", "extra": "added"},
        "absent",                                              # nothing to pin: omitted
        {"a": "1"},
        {"laya.onnx": "shared"},                               # nested env: {} placeholder
        {"laya.onnx": "env"}]                                  # env entry beats the shared one


def test_builtin_names_read_the_local_bundle_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYA_EDGE_MODELS", str(tmp_path / "models"))
    (tmp_path / "models" / "english").mkdir(parents=True)
    side = Side("edge", monkeypatch)
    side.patch_builds()
    router = ER.Router(hooks=[side.rec()])
    side.current = router
    router.load("english")
    assert side.builds == [(str(tmp_path / "models" / "english"),
                            {"device": None, "token": None, "subfolder": None})]
    with pytest.raises(FileNotFoundError) as missing:
        router.load("ml")
    message = str(missing.value)
    assert str(tmp_path / "models" / "multilingual") in message
    assert "python -m laya_edge.export --recipe export/multilingual.json" in message
    assert router.loaded == ["english"] and len(side.builds) == 1      # nothing built
    with pytest.raises(FileNotFoundError):                            # no event either
        router.predict(JA1, Q1)
    assert [e["event"] for e in side.trace] == ["on_load", "on_route"]
    (tmp_path / "models" / "multilingual").mkdir()
    router.load("ml")                                                  # a later load retries
    assert side.builds[-1][0] == str(tmp_path / "models" / "multilingual")
    # re-pointing a built-in uses the given source instead
    router.register("typed", ("/hub/repo", "typed-decisions"))
    router.load("typed")
    assert side.builds[-1] == ("/hub/repo", {"device": None, "token": None,
                                             "subfolder": "typed-decisions"})
    # without LAYA_EDGE_MODELS: ~/.cache/laya_edge/bundles/<name>
    monkeypatch.delenv("LAYA_EDGE_MODELS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(FileNotFoundError) as home_missing:
        ER.Router().load("typed-decisions")
    assert str(tmp_path / "home" / ".cache" / "laya_edge" / "bundles" / "typed-decisions") in \
        str(home_missing.value)
    assert "python -m laya_edge.export --recipe export/typed-decisions.json" in \
        str(home_missing.value)


def test_max_loaded_and_flags_are_coerced_like_upstream(monkeypatch):
    def scenario(side):
        out = []
        for value in (0, -3, "3", 2.9, True, 5):
            out.append(attempt(lambda: side.router(max_loaded=value).max_loaded))
        out.append(attempt(lambda: side.router(max_loaded="x")))
        router = side.router(auto_task_detection="yes", hooks_raise=0, hooks_concurrent=0,
                             hooks_timeout="2.5")
        out.append([router.auto_task_detection, router.hooks_raise, router.hooks_concurrent,
                    router.hooks_timeout, type(router._hooks_lock).__name__])
        typed = {k: {} for k in ER.TYPED_DECISION_WORKFLOWS["invoice_processing"]}
        out.append(router.route(EN1, typed))
        out.append(side.router().route(EN1, typed))
        standalone = side.router(standalone_repos=True)
        out.append([standalone.route(DE1)["repo"], standalone.route(EN1)["repo"],
                    plain(standalone.models)])
        out.append([repr(side.router()), repr(side.router(default="ml", max_loaded=4))])
        return out

    ours, theirs = both(monkeypatch, scenario)
    # laya_edge's documented differences (docs/agent.md#controls): a warning for each value that
    # is not a positive int, and a refusal naming max_loaded where upstream's int() fails
    assert ours.warnings == [("RuntimeWarning", f"max_loaded={value!r} is not a positive int; "
                              f"keeping {kept} checkpoint(s) loaded")
                             for value, kept in ((0, 1), (-3, 1), ("3", 3), (2.9, 2), (True, 1))]
    assert theirs.warnings == []
    assert ours.value[6] == "ValueError: max_loaded must be a positive int, got str 'x'"
    assert theirs.value[6].startswith("ValueError: invalid literal for int()")
    ours.warnings, ours.value[6] = theirs.warnings, theirs.value[6]
    assert_parity(ours, theirs)
    assert ours.value[:6] == [1, 1, 3, 2, 1, 5]
    assert ours.value[7][:4] == [True, False, False, 2.5]
    assert ours.value[8]["model"] == "typed-decisions"
    assert ours.value[8]["workflow"] == "invoice_processing"
    assert ours.value[9]["model"] == "english" and ours.value[9]["workflow"] == \
        "invoice_processing"
    assert ours.value[10][:2] == ["convaiinnovations/laya-multilingual", "convaiinnovations/laya"]
    assert ours.value[11] == ["Router(loaded=[], max_loaded=2, default='english')",
                              "Router(loaded=[], max_loaded=4, default='multilingual')"]
