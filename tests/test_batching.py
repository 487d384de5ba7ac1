"""Session runs of similar length (encode.length_groups) and their use by ONNXAgent."""
import itertools
import random

import pytest

from laya_edge.encode import LENGTH_STEP, RUN_OVERHEAD_TOKENS, length_groups


def padded_cost(groups, lengths):
    steps = [max(-(-lengths[i] // LENGTH_STEP) for i in group) * LENGTH_STEP for group in groups]
    return sum(len(group) * step for group, step in zip(groups, steps)) + \
        RUN_OVERHEAD_TOKENS * len(groups)


def best_cost_by_brute_force(lengths):
    """The cheapest split of the rows, sorted by length, into contiguous runs."""
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    best = None
    for cuts in itertools.product([False, True], repeat=len(order) - 1):
        groups, current = [], [order[0]]
        for index, cut in zip(order[1:], cuts):
            if cut:
                groups.append(current)
                current = []
            current.append(index)
        groups.append(current)
        cost = padded_cost(groups, lengths)
        best = cost if best is None else min(best, cost)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_plan_covers_every_row_once_at_the_least_cost(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([rng.randint(8, 40), rng.randint(100, 600)])
               for _ in range(rng.randint(1, 10))]
    groups = length_groups(lengths)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    assert padded_cost(groups, lengths) == best_cost_by_brute_force(lengths)


def test_similar_lengths_stay_one_run_and_very_different_ones_split():
    assert length_groups([100, 104, 98, 110]) == [[2, 0, 1, 3]]
    short, long = [20] * 8, [500] * 2
    groups = length_groups(short + long)
    assert groups == [list(range(8)), [8, 9]]


@pytest.mark.parametrize("seed", range(10))
def test_max_tokens_bounds_every_run_but_never_splits_a_row(seed):
    rng = random.Random(seed)
    lengths = [rng.randint(10, 700) for _ in range(rng.randint(1, 60))]
    groups = length_groups(lengths, max_tokens=1024)
    assert sorted(i for group in groups for i in group) == list(range(len(lengths)))
    for group in groups:
        assert len(group) == 1 or len(group) * max(lengths[i] for i in group) <= 1024


def test_agent_answers_a_mixed_batch_in_several_runs_with_the_same_answers(bundles, monkeypatch):
    """A batch of very different lengths runs as several session runs on the CPU, and every
    state's answers equal what it gets alone (within the 4-decimal rounding)."""
    import laya_edge
    from laya_edge import onnx_agent
    from laya_edge.accelerators import CPU_RUN_TOKENS
    from agent_support import assert_close

    agent = laya_edge.load(str(bundles["minilm"]))
    questions = {"dept": {"type": "choice", "instructions": "Which team?",
                          "criteria": ["billing", "tech", "sales"]},
                 "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
    states = ["refund please"] * 3 + ["the export crashes again and again " * 40] * 2 + ["hi"]
    alone = [agent.system_one(state, questions) for state in states]
    runs = []
    real_run = onnx_agent.run
    monkeypatch.setattr(onnx_agent, "run", lambda session, inputs, binding=None: (
        runs.append(inputs["input_ids"].shape), real_run(session, inputs, binding))[1])
    together = agent.predict_batch(states, questions)
    assert len(runs) > 1
    assert sum(shape[0] for shape in runs) == len(states) * len(questions)
    assert all(shape[0] * shape[1] <= CPU_RUN_TOKENS or shape[0] == 1
               for shape in runs)
    for ours, single in zip(together, alone):
        assert_close(ours, single)
