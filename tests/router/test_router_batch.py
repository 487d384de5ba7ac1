"""Router.predict_batch against upstream laya 0.4.15: one load per checkpoint, one forward pass
per question group, per-request contexts and hooks (docs/hooks/lifecycle.md#routerpredict_batch)."""
from __future__ import annotations

from typing import Any, Dict, List

import pytest

from router_support import (Act, DE1, DE2, EN1, EN2, FR1, JA1, OldAgent, Q1, Q1_REORDERED,
                            Q_CRIT_A, Q_CRIT_B, Q_UMLAUT, SIDES, assert_parity, both, plain,
                            raiser, run_side, same, two_agents, without)

# upstream laya emits DeprecationWarnings these comparisons do not look at
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# ==============================================================================================
# predict_batch (docs/hooks/lifecycle.md#routerpredict_batch, docs/design/routing.md#answering)
# ==============================================================================================

def grouping_requests() -> List[Dict[str, Any]]:
    return [
        {"state": EN1, "questions": Q1},                                   # 0  en  G1
        {"state": DE1, "questions": Q1},                                   # 1  ml  H1 (de)
        {"state": EN2, "questions": Q1_REORDERED},                         # 2  en  G2
        {"state": FR1, "questions": Q1, "lang": "fr"},                     # 3  ml  H2 (fr)
        {"state": EN1 + " again", "questions": Q1, "max_len": 64},         # 4  en  G3
        {"state": "anything", "questions": Q1, "model": "ml"},             # 5  ml  H3 (no lang)
        {"state": EN2, "questions": dict(Q1)},                             # 6  en  G1 (equal JSON)
        {"state": JA1, "questions": Q1, "head_max_len": 32},               # 7  ml  H4
        {"state": DE2, "questions": Q1},                                   # 8  ml  H1
        {"state": EN1, "questions": Q_CRIT_A},                             # 9  en  G4
        {"state": EN1, "questions": Q_CRIT_B},                             # 10 en  G5 (order)
        {"state": "x", "questions": Q1, "model": "english", "max_len": 64},  # 11 en G3
        {"state": "PIN this English request about a billing problem", "questions": Q1},  # 12 H3
        {"state": EN1 + "!", "questions": Q1, "unrelated": "ignored"},     # 13 en  G1
        {"state": "Ärger mit der Rechnung", "questions": Q_UMLAUT, "model": "en"},  # 14 en G6
    ]


def test_predict_batch_groups_per_checkpoint_then_per_question_group(monkeypatch):
    def scenario(side):
        def pin(ctx):
            if str(ctx.states[0]).startswith("PIN"):
                ctx.decision = {"model": "ml", "reason": "pinned"}

        router = two_agents(side, hooks=[Act("on_route", pin), side.rec()])
        diagnostics: Dict[str, Any] = {}
        results = router.predict_batch(grouping_requests(), batch_size=2, sort_by_length=True,
                                       diagnostics=diagnostics)
        return {"results": results, "diagnostics": diagnostics}

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    reqs = grouping_requests()
    base = {"batch_size": 2, "sort_by_length": True}
    expected = [
        ("en", [0, 6, 13], list(Q1), base),
        ("en", [2], list(Q1_REORDERED), base),
        ("en", [4, 11], list(Q1), dict(base, max_len=64)),
        ("en", [9], ["topic"], base),
        ("en", [10], ["topic"], base),
        ("en", [14], ["dringend"], base),
        ("ml", [1, 8], list(Q1), dict(base, lang="de")),
        ("ml", [3], list(Q1), dict(base, lang="fr")),
        ("ml", [5, 12], list(Q1), base),
        ("ml", [7], list(Q1), dict(base, head_max_len=32)),
    ]
    assert [(c[0], c[2], c[3], c[4]) for c in ours.calls] == [
        (label, [plain(reqs[i]["state"]) for i in idx], qs, kwargs)
        for label, idx, qs, kwargs in expected]
    # routes in input order, then per checkpoint: all starts (input order), all ends (reverse)
    events = ours.events()
    assert events[:15] == [("rec", "on_route")] * 15
    starts_ends = [(e["event"], e["states"][0]) for e in ours.trace[15:]]
    en_idx = [0, 2, 4, 6, 9, 10, 11, 13, 14]
    ml_idx = [1, 3, 5, 7, 8, 12]
    assert starts_ends == (
        [("on_predict_start", plain(reqs[i]["state"])) for i in en_idx]
        + [("on_predict_end", plain(reqs[i]["state"])) for i in reversed(en_idx)]
        + [("on_predict_start", plain(reqs[i]["state"])) for i in ml_idx]
        + [("on_predict_end", plain(reqs[i]["state"])) for i in reversed(ml_idx)])
    starts = {e["states"][0] if isinstance(e["states"][0], str) else "EN2": e
              for e in ours.trace[15:] if e["event"] == "on_predict_start"}
    assert starts[EN1 + " again"]["max_len"] == 64
    assert starts[JA1]["head_max_len"] == 32 and starts[JA1]["max_len"] is None
    assert starts["anything"]["model"] == "multilingual"       # resolved in batches
    assert starts["PIN this English request about a billing problem"]["decision"] == \
        {"model": "ml", "reason": "pinned"}
    assert all(e["router"] is True and e["results"] is None for e in starts.values())
    # every request has its own run id
    assert len({e["run"] for e in ours.trace[15:]}) == 15
    results = ours.value["results"]
    assert [r["model"] for r in results] == ["ml" if i in ml_idx else "en" for i in range(15)]
    assert results[12]["routing"] == {"model": "ml", "reason": "pinned"}
    assert ours.value["diagnostics"] == {"sort_by_length": {"groups": 10, "reordered": 1,
                                                            "smallest": 1, "largest": 3}}


def test_predict_batch_with_one_hook_set_equals_predict_per_request(monkeypatch):
    requests = [{"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
                {"state": EN2, "questions": Q1, "max_len": 99}]

    def batched(side):
        router = two_agents(side, hooks=[side.rec()])
        return router.predict_batch(requests)

    def one_by_one(side):
        router = two_agents(side, hooks=[side.rec()])
        return [router.predict(r["state"], r["questions"], max_len=r.get("max_len"))
                for r in requests]

    for side_name in SIDES:
        batch = run_side(side_name, monkeypatch, batched)
        single = run_side(side_name, monkeypatch, one_by_one)
        assert batch.err() is None and single.err() is None
        # the same payloads, routing included, whichever entry point answered
        same(batch.value, single.value)
        # and the same events per request (batch: all routes first, then the groups)
        same(sorted(batch.events()), sorted(single.events()))
        key = lambda e: (e["event"], repr(e["states"]))    # noqa: E731
        strip = lambda e: {k: v for k, v in e.items() if k not in ("run", "model")}  # noqa: E731
        same([strip(e) for e in sorted(batch.trace, key=key)],
             [strip(e) for e in sorted(single.trace, key=key)])


def test_start_hook_skip_and_rewrite_affect_only_their_own_request(monkeypatch):
    def scenario(side):
        def start(ctx):
            state = ctx.states[0]
            if state == "REWRITE":
                ctx.states = ["rewritten state"]
                ctx.questions = {"only": {"type": "noul"}}
                ctx.max_len = 16
            elif state == "SKIP":
                ctx.skip([{"answers": {}, "usage": {"input_tokens": 5, "output_tokens": 1}}])
            elif state == "BUDGET":
                ctx.head_max_len = 8

        router = two_agents(side, hooks=[Act("on_predict_start", start), side.rec()])
        shared = dict(Q1)
        return router.predict_batch([
            {"state": EN1, "questions": shared}, {"state": "REWRITE", "questions": shared},
            {"state": "SKIP", "questions": shared}, {"state": "BUDGET", "questions": shared},
            {"state": EN2, "questions": shared}], batch_size=4)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [(c[2], c[3], c[4]) for c in ours.calls] == [
        ([EN1, plain(EN2)], list(Q1), {"batch_size": 4}),
        (["rewritten state"], ["only"], {"batch_size": 4, "max_len": 16}),
        (["BUDGET"], list(Q1), {"batch_size": 4, "head_max_len": 8})]
    skipped = ours.value[2]
    assert skipped["usage"] == {"input_tokens": 5, "output_tokens": 1}
    assert skipped["routing"]["model"] == "english"
    ends = {e["states"][0] if isinstance(e["states"][0], str) else "EN2": e
            for e in ours.trace if e["event"] == "on_predict_end"}
    assert ends["rewritten state"]["questions"] == {"only": {"type": "noul"}}
    assert ends["rewritten state"]["max_len"] == 16
    assert ends["SKIP"]["usage"] == {"input_tokens": 5, "output_tokens": 1}


def test_in_place_mutation_of_a_shared_questions_dict_reaches_every_request(monkeypatch):
    def scenario(side):
        def start(ctx):
            if ctx.states[0] == EN1:
                ctx.questions["extra"] = {"type": "noul"}

        router = two_agents(side, hooks=[Act("on_predict_start", start)])
        shared = dict(Q1)
        router.predict_batch([{"state": EN2, "questions": shared},
                              {"state": EN1, "questions": shared}])
        return list(shared)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.value == ["urgent", "topic", "extra"]
    assert [c[3] for c in ours.calls] == [["urgent", "topic", "extra"]]


FAILURES = ["start-hook", "agent", "usage", "result-count"]


@pytest.mark.parametrize("failure", FAILURES)
def test_a_failing_group_fails_every_started_request(monkeypatch, failure):
    """Failure in the second checkpoint group: the first group has completed (its ends ran with
    results), every started request of the failing group gets on_error then on_predict_end in
    reverse order, the third group never loads or starts."""
    boom = RuntimeError("group failed")

    def scenario(side):
        side.patch_builds()
        hooks = [side.rec()]
        if failure == "start-hook":
            hooks.insert(0, raiser("on_predict_start", boom, lambda ctx: ctx.states[0] == DE2))

        def cache(ctx):
            if failure == "usage" and ctx.states[0] == DE1:
                ctx.skip([{"answers": {}, "usage": {"input_tokens": "lots"}}])

        router = side.router(hooks=hooks + [Act("on_predict_start", cache)],
                             models={"typed-decisions": "/srv/typed"})
        router.attach("english", side.agent("en"))
        ml = side.agent("ml", fail=boom if failure == "agent" else None)
        if failure == "result-count":
            ml.predict_batch = lambda states, questions, **kw: []
        router.attach("multilingual", ml)
        return router.predict_batch([
            {"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
            {"state": EN2, "questions": Q1}, {"state": FR1, "questions": Q_UMLAUT},
            {"state": DE2, "questions": Q1}, {"state": "typed", "questions": Q1, "task": "typed"},
            {"state": JA1, "questions": Q1}])

    ours, theirs = both(monkeypatch, scenario)
    same(ours.err(), theirs.err())
    same(ours.calls, theirs.calls)
    assert ours.builds == theirs.builds == []              # the typed group never loads
    # the seeds' item 2 (docs/hooks/lifecycle.md): our on_error never sees elapsed_ms; upstream's
    # does
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert all(not e["elapsed"] for e in ours.trace if e["event"] == "on_error")
    assert all(e["elapsed"] for e in theirs.trace if e["event"] == "on_error")
    expected_error = {
        "start-hook": "RuntimeError: group failed", "agent": "RuntimeError: group failed",
        "usage": "ValueError: invalid literal for int() with base 10: 'lots'",
        "result-count": "RuntimeError: internal error: Agent.predict_batch returned 0 results "
                        "for 3 states"}[failure]
    assert ours.err() == expected_error
    events = [(e["event"], e["states"][0] if isinstance(e["states"][0], str) else "EN2")
              for e in ours.trace if e["event"] != "on_route"]
    en_done = [("on_predict_start", EN1), ("on_predict_start", "EN2"),
               ("on_predict_end", "EN2"), ("on_predict_end", EN1)]
    # a raising start hook stops the recorder (installed after it) for that request only
    started = [DE1, FR1, DE2] if failure == "start-hook" else [DE1, FR1, DE2, JA1]
    recorded_starts = started[:-1] if failure == "start-hook" else started
    failed = [item for s in reversed(started) for item in (("on_error", s), ("on_predict_end", s))]
    assert events == en_done + [("on_predict_start", s) for s in recorded_starts] + failed
    # the first group ended with results and usage; the failing one carries the shared error
    assert all(e["results"] and e["usage"] and e["error"] is None
               for e in ours.trace[7:11] if e["event"] == "on_predict_end")
    fail_ends = [e for e in ours.trace if e["event"] == "on_predict_end" and e["error"]]
    assert {e["error"] for e in fail_ends} == {expected_error}
    assert all(e["usage"] is None for e in fail_ends)
    if failure == "usage":
        # requests whose question group already ran keep their results on the failure path
        with_results = [e["states"][0] for e in fail_ends if e["results"] is not None]
        assert with_results == [JA1, DE2, FR1, DE1]


def test_end_hook_errors_are_raised_after_every_request_ended(monkeypatch):
    def scenario(side):
        def bad(ctx):
            if ctx.states[0] in (EN1, DE1) or isinstance(ctx.states[0], dict):
                raise ValueError(f"end hook failed for {str(ctx.states[0])[:12]}")

        router = two_agents(side, hooks=[side.rec(), Act("on_predict_end", bad),
                                         side.rec("after")])
        router.predict_batch([{"state": EN1, "questions": Q1}, {"state": DE1, "questions": Q1},
                              {"state": EN2, "questions": Q1},
                              {"state": "Another English ticket about a refund for my order",
                               "questions": Q1}])

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # ends run in reverse order: the last (fine), EN2 (fails first), EN1 (fails too); the first
    # failure is raised once every request of the group has ended; later groups never run
    assert ours.err() == "ValueError: end hook failed for {'subject': "
    ends = [(e["tag"], str(e["states"][0])[:12]) for e in ours.trace
            if e["event"] == "on_predict_end"]
    assert ends == [("rec", "Another Engl"), ("after", "Another Engl"),
                    ("rec", "{'subject': "), ("rec", EN1[:12])]
    assert [c[0] for c in ours.calls] == ["en"]


def test_error_and_end_hook_failures_on_the_failure_path_are_chained(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[raiser("on_error", KeyError("error hook")), side.rec()])
        router.attach("english", side.agent("en", fail=RuntimeError("forward failed")))
        try:
            router.predict_batch([{"state": EN1, "questions": Q1},
                                  {"state": EN2, "questions": Q1}])
        except RuntimeError as exc:
            return {"context": plain(exc.__context__), "msg": str(exc)}

    ours, theirs = both(monkeypatch, scenario)
    same(ours.value, theirs.value)
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert ours.value == {"context": "KeyError: 'error hook'", "msg": "forward failed"}
    assert [e["event"] for e in ours.trace if e["event"] != "on_route"] == \
        ["on_predict_start", "on_predict_start", "on_predict_end", "on_predict_end"]


def test_lenient_start_hook_failure_warns_and_the_batch_continues(monkeypatch):
    def scenario(side):
        router = two_agents(side, hooks=[raiser("on_predict_start", RuntimeError("flaky")),
                                         side.rec()])
        return router.predict_batch([{"state": EN1, "questions": Q1},
                                     {"state": DE1, "questions": Q1}], hooks_raise=False)

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.warnings == [
        ("RuntimeWarning", "laya: hook Act.on_predict_start failed: flaky")] * 2
    assert len(ours.value) == 2


def test_route_batch_validation_messages_and_nothing_loads(monkeypatch):
    ok = {"state": EN1, "questions": Q1}
    cases = [None, {"state": EN1, "questions": Q1}, "requests", b"bytes", 5,
             [ok, 5], [ok, {"questions": Q1}], [ok, {"state": None, "questions": Q1}],
             [ok, {"state": EN1}], [ok, {"state": EN1, "questions": ["q"]}],
             [ok, {"state": EN1, "questions": Q1, "model": "nope"}]]

    def scenario(side):
        side.patch_builds()
        router = side.router(hooks=[side.rec()],
                             models={"english": "/srv/en", "multilingual": "/srv/ml"})
        messages = []
        for case in cases:
            for method in (router.route_batch, router.predict_batch):
                try:
                    method(case)
                except (TypeError, ValueError) as exc:
                    messages.append(plain(exc))
        messages.append(router.route_batch([]))
        messages.append(router.predict_batch([]))
        messages.append(router.route_batch((ok,), explain=True)[0]["detection"]["diagnostic"])
        messages.append(router.loaded)
        return messages

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert ours.builds == [] and ours.value[-1] == []
    assert ours.value[:12:2] == [
        "TypeError: requests must be a sequence of request dictionaries"] * 5 + [
        "TypeError: request 1 must be a dict, got int"]
    assert ours.value[12:22:2] == [
        "ValueError: request 1 is missing required key 'state'",
        "TypeError: request 1 'state' must not be None; pass a string, dict, or list",
        "ValueError: request 1 is missing required key 'questions'",
        "TypeError: request 1 'questions' must be a dict, got list",
        "ValueError: unknown model 'nope'; choose one of ['english', 'multilingual', "
        "'typed-decisions'] (or an alias: ['decisions', 'default', 'en', 'laya', "
        "'laya-multilingual', 'laya-typed-decisions', 'ml', 'multi', 'typed', "
        "'typed_decisions'])"]
    assert ours.value[22:24] == [[], []]
    # earlier items were routed (on_route fired) before a later one was rejected; the empty
    # batches fired nothing; nothing was ever loaded
    assert {e["event"] for e in ours.trace} == {"on_route"}
    assert len(ours.trace) == 12 + 1


def test_lang_and_sort_by_length_retry_for_agents_that_do_not_take_them(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        old = OldAgent(side, "old")
        old.lang_temperatures = {"de": {}}        # so the batch passes `lang`
        router.attach("english", old)
        router.attach("multilingual", OldAgent(side, "old-ml"))
        out = {"single": router.predict(EN1, Q1, max_len=50),
               "single_ml": router.predict(DE1, Q1),
               "lang": router.predict_batch([{"state": EN1, "questions": Q1}], batch_size=3),
               "sort": router.predict_batch([{"state": DE1, "questions": Q1}], batch_size=3,
                                            sort_by_length=True)}
        try:  # both refused: Python names only the first, so one retry is not enough
            router.predict_batch([{"state": EN1, "questions": Q1}], sort_by_length=True)
        except TypeError as exc:
            out["both"] = plain(exc)
        return out

    ours, theirs = both(monkeypatch, scenario)
    same(ours.value, theirs.value)
    same(ours.calls, theirs.calls)
    same(without(ours.trace, "on_error", "elapsed"), without(theirs.trace, "on_error", "elapsed"))
    assert [(c[0], c[1], c[4]) for c in ours.calls] == [
        ("old", "system_one", {"max_len": 50, "head_max_len": None}),
        ("old-ml", "system_one", {"max_len": None, "head_max_len": None}),
        ("old", "predict_batch", {"batch_size": 3, "max_len": None}),
        ("old-ml", "predict_batch", {"batch_size": 3, "max_len": None})]
    assert ours.value["single"]["routing"]["model"] == "english"
    assert ours.value["both"] == ("TypeError: OldAgent.predict_batch() got an unexpected keyword "
                                  "argument 'sort_by_length'")


def test_refused_keywords_are_dropped_one_call_later(monkeypatch):
    def scenario(side):
        router = side.router()
        router.attach("multilingual", side.agent("ml", refuse={"lang"},
                                                 lang_temperatures={"de": {}}))
        router.attach("english", side.agent("en", refuse={"sort_by_length"}))
        return [router.predict(DE1, Q1),
                router.predict_batch([{"state": DE1, "questions": Q1},
                                      {"state": EN1, "questions": Q1}],
                                     batch_size=2, sort_by_length=True)]

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    assert [(c[0], c[1], c[4]) for c in ours.calls] == [
        ("ml", "system_one", {"lang": "de"}), ("ml", "system_one", {}),
        ("ml", "predict_batch", {"batch_size": 2, "lang": "de", "sort_by_length": True}),
        ("ml", "predict_batch", {"batch_size": 2, "sort_by_length": True}),
        ("en", "predict_batch", {"batch_size": 2, "sort_by_length": True}),
        ("en", "predict_batch", {"batch_size": 2})]


def test_other_type_errors_from_the_agent_are_not_retried(monkeypatch):
    def scenario(side):
        router = side.router(hooks=[side.rec()])
        router.attach("english", side.agent("en", fail=TypeError(
            "helper() got an unexpected keyword argument 'lang'")))
        router.attach("multilingual", side.agent("ml", fail=TypeError("bad input")))
        errors = []
        for call in (lambda: router.predict_batch([{"state": EN1, "questions": Q1}]),
                     lambda: router.predict(DE1, Q1)):
            try:
                call()
            except TypeError as exc:
                errors.append(plain(exc))
        return errors

    ours, theirs = both(monkeypatch, scenario)
    assert_parity(ours, theirs)
    # the batch did not pass `lang` (the english agent has no lang_temperatures): no retry
    assert ours.value == ["TypeError: helper() got an unexpected keyword argument 'lang'",
                          "TypeError: bad input"]
    assert len(ours.calls) == 2
