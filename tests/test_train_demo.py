"""scripts/train_demo.py: its metrics, a full smoke run on a tiny checkpoint, and seeded
reproducibility of training and calibration."""
import json
from pathlib import Path

import pytest

from modules import load_file

train_demo = load_file("scripts/train_demo.py", "train_demo")


def test_expected_calibration_error_by_hand():
    # bin (0.867, 0.933]: accuracy 0.5 at confidence 0.9; bin (0.6, 0.667]: 1.0 at 0.65
    ece = train_demo.expected_calibration_error([0.9, 0.9, 0.65, 0.65], [True, False, True, True])
    assert ece == pytest.approx(0.5 * 0.4 + 0.5 * 0.35)
    assert train_demo.expected_calibration_error([1.0, 0.5], [True, False]) == \
        pytest.approx(0.5 * 0.0 + 0.5 * 0.5)


def test_predicted_reads_each_question_type():
    assert train_demo.predicted({"noul": 0.7}, {"type": "noul"}) is True
    assert train_demo.predicted({"noul": 0.3}, {"type": "noul"}) is False
    assert train_demo.predicted({"probabilities": {"a": 0.2, "b": 0.8}}, {"type": "choice"}) == "b"
    assert train_demo.predicted({"probabilities": {"0": 0.1, "1": 0.3, "2": 0.6}},
                                {"type": "score"}) == 2


def test_evaluate_counts_per_type_and_per_question(monkeypatch):
    rows = [{"state": "s", "questions": {"d": {"type": "choice"}, "u": {"type": "noul"}},
             "expected": {"d": "b", "u": True}},
            {"state": "t", "questions": {"d": {"type": "choice"}, "u": {"type": "noul"}},
             "expected": {"d": "a", "u": True}}]
    answer = {"d": {"probabilities": {"a": 0.4, "b": 0.6}, "answer_confidence": 0.6},
              "u": {"noul": 0.9, "answer_confidence": 0.9}}
    calls = []

    def predict_batch(states, questions):
        calls.append((states, list(questions)))
        return [{"answers": {key: answer[key] for key in questions}} for _ in states]

    metrics = train_demo.evaluate(predict_batch, rows)
    assert calls == [(["s", "t"], ["d"]), (["s", "t"], ["u"])]  # one batch per question
    assert metrics["by_type"]["choice"] == {"n": 2, "accuracy": 0.5, "mean_confidence": 0.6,
                                            "ece": 0.1}
    assert metrics["by_type"]["noul"]["accuracy"] == 1.0
    assert metrics["by_question"]["u"]["ece"] == pytest.approx(0.1)
    assert metrics["overall"]["n"] == 4 and metrics["overall"]["accuracy"] == 0.75
    assert "first_rows" not in metrics  # no more rows than CHECK_ROWS
    monkeypatch.setattr(train_demo, "CHECK_ROWS", 1)
    first = train_demo.evaluate(predict_batch, rows)["first_rows"]
    assert first["rows"] == 1 and first["by_question"]["d"]["n"] == 1
    assert first["by_question"]["d"]["accuracy"] == 1.0  # the first row expects "b"


def test_the_teacher_target_mixes_the_label_with_the_teachers_mean_answer_over_real_options():
    """Half the label, half the mean of the teachers' softmax over each row's own options: an
    option slot past the row's options gets nothing, however large a teacher's logit there."""
    import math

    import torch

    collated = {"input_ids": torch.zeros(1, 4, dtype=torch.long),
                "attention_mask": torch.ones(1, 4, dtype=torch.long),
                "marker_pos": torch.tensor([[1, 2, 0]]),
                "marker_mask": torch.tensor([[True, True, False]]),
                "qtype": torch.tensor([0]), "target": torch.tensor([[1.0, 0.0, 0.0]])}
    seen = []

    def teacher(logits):
        def forward(input_ids, attention_mask, marker_pos, marker_mask, qtype):
            seen.append(marker_mask)
            return torch.tensor([logits]), None
        return forward

    # softmax over the two real options: (1/4, 3/4) and (3/4, 1/4), so their mean is (1/2, 1/2)
    teachers = [teacher([0.0, math.log(3), 50.0]), teacher([math.log(3), 0.0, 50.0])]
    target = train_demo.teacher_target(teachers, collated)
    label_weight = train_demo.TEACHER_LABEL_WEIGHT
    expected = [label_weight + (1 - label_weight) / 2, (1 - label_weight) / 2, 0.0]
    assert target[0].tolist() == pytest.approx(expected)
    assert len(seen) == 2 and all(mask is collated["marker_mask"] for mask in seen)


def test_a_smoke_run_writes_bundle_report_and_card(checkpoints, tmp_path):
    models = tmp_path / "models"
    code = train_demo.main(["--base", str(checkpoints["modernbert-tiny"]), "--ship", "fp16",
                            "--train-tickets", "16", "--calib-tickets", "6",
                            "--test-tickets", "4", "--models", str(models),
                            "--refresh-runs", "2", "--refresh-batches", "1", "--teachers", "1",
                            "--work", str(tmp_path / "work"), "--no-handwritten"])
    assert code == 0
    bundle = models / train_demo.BUNDLE_NAME
    manifest = json.loads((bundle / "laya_edge.json").read_text())
    assert list(manifest["variants"]) == ["fp16"]
    assert not (bundle / "laya.onnx").exists() and (bundle / "laya.fp16.onnx").is_file()
    report = json.loads((models / train_demo.REPORT_NAME).read_text())
    held = report["evaluation"]["bundle"]
    assert held["precision"] == "fp16" and held["overall"]["n"] == 4 * 6
    assert report["evaluation"]["torch"]["overall"]["n"] == 4 * 6
    assert report["data"] == {"train_rows": 16, "calib_rows": 6, "test_rows": 4}
    assert report["training"]["train_items"] > 0
    card = (models / "README.md").read_text()
    for kind, entry in held["by_type"].items():
        assert f"| {kind} | {entry['n']} | {entry['accuracy']:.3f} | {entry['ece']:.3f} |" in card
    command = train_demo.reproduce_command(report).split()
    assert " ".join(command) in card
    rerun = train_demo.parse_args(command[2:])
    assert (rerun.seed, rerun.train_tickets, rerun.calib_tickets, rerun.test_tickets,
            rerun.refresh_runs, rerun.refresh_batches, rerun.teachers,
            rerun.refresh_student) == (report["seed"], 16, 6, 4, 2, 1, 1, "best")
    assert report["training"]["refresh"]["runs"] == 2
    # the refresh learnt from the trained model and one more seed, trained from the same base
    assert report["training"]["refresh"]["teachers"]["models"] == 2
    assert (tmp_path / "work" / "teacher-1" / "model.safetensors").is_file()
    assert {"teachers", "refresh"} <= set(report["durations"])
    # by default the refresh fine-tuned whichever of the two did best on the calibration split
    student = report["training"]["refresh"]["student"]
    accuracy = student["calibration_accuracy"]
    assert set(accuracy) == {"mixed", "teacher-1"}
    assert accuracy[student["chosen"]] == max(accuracy.values())
    assert f"`{student['chosen']}`, the most accurate" in " ".join(card.split())
    assert "averaged answers of 2 models" in card
    # --evaluate-only re-measures the written bundle and gets the same figures;
    # --update-report writes them into the report and card, the rest unchanged
    again = train_demo.evaluate_bundle(bundle, train_demo.splits(0, 16, 6, 4)["test"])
    assert again == held
    report["evaluation"]["bundle"]["overall"]["accuracy"] = -1.0
    (models / train_demo.REPORT_NAME).write_text(json.dumps(report))
    assert train_demo.main(["--models", str(models), "--train-tickets", "0", "--calib-tickets",
                            "6", "--test-tickets", "4", "--evaluate-only",
                            "--update-report"]) == 0
    rewritten = json.loads((models / train_demo.REPORT_NAME).read_text())
    assert rewritten["evaluation"]["bundle"] == again
    assert rewritten["training"] == report["training"]
    assert (models / "README.md").read_text() == card
    with pytest.raises(SystemExit):
        train_demo.main(["--models", str(models), "--update-report"])
    with pytest.raises(SystemExit):  # teachers teach the refresh: none without it
        train_demo.main(["--models", str(models), "--teachers", "1", "--refresh-runs", "0"])
    with pytest.raises(SystemExit):  # and there is no student to pick without it
        train_demo.main(["--models", str(models), "--refresh-student", "best",
                         "--refresh-runs", "0"])


def test_the_reproduce_command_names_only_what_the_run_changed_from_the_defaults():
    defaults = train_demo.parse_args([])
    report = {"seed": 3,
              "data": {"train_rows": 4500, "calib_rows": defaults.calib_tickets,
                       "test_rows": defaults.test_tickets},
              "training": {"config": {"phase_batches": 60, "department_batches": None,
                                      "max_batches": 1125, "relabel": False,
                                      "encoder_lr": defaults.encoder_lr,
                                      "head_lr": defaults.head_lr}}}
    command = train_demo.reproduce_command(report).split()
    rerun = train_demo.parse_args(command[2:])
    assert (rerun.seed, rerun.train_tickets, rerun.department_batches, rerun.max_batches,
            rerun.relabel, rerun.refresh_runs, rerun.teachers) == \
        (3, 4500, 60, 1125, False, 0, 0)  # no refresh, so no teachers
    assert "--calib-tickets" not in command and "--head-lr" not in command
    # a run from before --base-seed built its base with its own seed; later runs record theirs
    assert rerun.base_seed == 3
    report["base_seed"] = defaults.base_seed
    assert "--base-seed" not in train_demo.reproduce_command(report).split()
    report["base_seed"] = 5
    assert train_demo.parse_args(train_demo.reproduce_command(report).split()[2:]).base_seed == 5
    # a run of today's defaults (a refresh with teachers) needs nothing but its seed
    default_run = {"seed": 0, "base_seed": defaults.base_seed,
                   "data": {"train_rows": defaults.train_tickets,
                            "calib_rows": defaults.calib_tickets,
                            "test_rows": defaults.test_tickets},
                   "training": {"config": {**report["training"]["config"],
                                           "phase_batches": defaults.phase_batches,
                                           "department_batches": defaults.department_batches,
                                           "max_batches": defaults.max_batches,
                                           "relabel": defaults.relabel},
                                "refresh": {"runs": defaults.refresh_runs,
                                            "batches": defaults.refresh_batches,
                                            "teachers": {"models": defaults.teachers + 1},
                                            "student": {"rule": "best", "chosen": "teacher-1"}}}}
    assert train_demo.reproduce_command(default_run).split()[2:] == ["--seed", "0"]
    # a refresh from before --refresh-student fine-tuned the trained model, no longer the default
    del default_run["training"]["refresh"]["student"]
    command = train_demo.reproduce_command(default_run).split()
    assert command[2:] == ["--seed", "0", "--refresh-student", "trained"]
    assert train_demo.parse_args(command[2:]).refresh_student == "trained"
    assert defaults.refresh_student == "best"
    without_refresh = train_demo.parse_args(["--refresh-runs", "0"])
    assert defaults.teachers > 0 and without_refresh.teachers == 0
    assert without_refresh.refresh_student is None
    report["training"]["config"]["max_batches"] = None   # an uncapped run: no flag says so
    with pytest.raises(ValueError, match="max_batches"):
        train_demo.reproduce_command(report)


def test_training_and_calibration_are_reproducible_with_a_seed(checkpoints, tmp_path):
    from safetensors.numpy import load_file as load_weights

    data = train_demo.splits(5, 16, 8, 0)
    args = train_demo.parse_args(["--seed", "5", "--phase-batches", "1"])
    results = []
    for run in ("a", "b"):
        out = tmp_path / run
        training = train_demo.train(checkpoints["modernbert-tiny"], data["train"], out, args)
        calibration = train_demo.calibrate(out, data["calib"])
        results.append((training, calibration, load_weights(str(out / "model.safetensors"))))
    (train_a, calib_a, weights_a), (train_b, calib_b, weights_b) = results
    assert train_a == train_b and calib_a == calib_b
    assert weights_a.keys() == weights_b.keys()
    assert all((weights_a[k] == weights_b[k]).all() for k in weights_a)


def test_averaged_checkpoints_hold_the_mean_of_their_weights(checkpoints, tmp_path):
    import numpy as np
    from safetensors.numpy import load_file as load_weights

    args = train_demo.parse_args(["--seed", "5", "--phase-batches", "1"])
    sources = []
    for seed in (5, 6):
        sources.append(tmp_path / str(seed))
        train_demo.train(checkpoints["modernbert-tiny"], train_demo.splits(seed, 8, 0, 0)["train"],
                         sources[-1], args)
    train_demo.average_checkpoints(sources, tmp_path / "mean")
    first, second, mean = (load_weights(str(path / "model.safetensors"))
                           for path in sources + [tmp_path / "mean"])
    moved = [key for key in first if not np.array_equal(first[key], second[key])]
    assert moved
    for key in first:
        expected = (first[key].astype(np.float32) + second[key].astype(np.float32)) / 2
        assert mean[key].dtype == first[key].dtype
        np.testing.assert_allclose(mean[key].astype(np.float32), expected, rtol=1e-3, atol=1e-3)
    assert ((tmp_path / "mean" / "rl_agent_config.json").read_text()
            == (sources[0] / "rl_agent_config.json").read_text())


def test_training_keeps_the_word_embeddings_as_pretrained(checkpoints, tmp_path):
    import torch
    from laya.train import load_checkpoint

    base = checkpoints["modernbert-tiny"]
    args = train_demo.parse_args(["--seed", "5", "--phase-batches", "1"])
    train_demo.train(base, train_demo.splits(5, 16, 0, 0)["train"], tmp_path / "t", args)
    before, after = (load_checkpoint(str(path))[0].encoder for path in (base, tmp_path / "t"))
    assert torch.equal(before.get_input_embeddings().weight, after.get_input_embeddings().weight)
    moved = [name for (name, old), (_, new) in zip(before.named_parameters(),
                                                   after.named_parameters())
             if not torch.equal(old, new)]
    assert moved  # the rest of the encoder is fine-tuned


def test_curriculum_trains_one_kind_at_a_time_then_mixes():
    import random

    kinds = train_demo.CURRICULUM
    items = [{"key": key, "i": i, "length": (7 * i) % 40} for key in kinds for i in range(40)]
    batches = train_demo.curriculum(items, 2, random.Random(0))
    phases = batches[:2 * len(kinds)]
    assert [batch[0]["key"] for batch in phases] == [key for key in kinds for _ in range(2)]
    assert all(len(batch) == train_demo.BATCH and len({it["key"] for it in batch}) == 1
               for batch in phases)
    mixed = batches[len(phases):]
    seen = [(it["key"], it["i"]) for batch in batches for it in batch]
    assert sorted(seen) == sorted((it["key"], it["i"]) for it in items)
    assert any(len({it["key"] for it in batch}) > 1 for batch in mixed)
    # length-bucketed: less padding than the same items batched in shuffled order
    def padded(groups):
        return sum(max(it["length"] for it in group) * len(group) for group in groups)
    rest = [it for batch in mixed for it in batch]
    random.Random(1).shuffle(rest)
    shuffled = [rest[i:i + train_demo.BATCH] for i in range(0, len(rest), train_demo.BATCH)]
    assert padded(mixed) < padded(shuffled)


def test_capped_curriculum_keeps_the_department_leftovers_in_its_mixed_phase():
    import random

    kinds = train_demo.CURRICULUM
    items = [{"key": key, "i": i, "length": i % 30} for key in kinds for i in range(200)]
    phases = 4 + 2 * (len(kinds) - 1)
    roomy = train_demo.curriculum(items, 2, random.Random(0), department_batches=4,
                                  max_batches=40)
    assert [batch[0]["key"] for batch in roomy[:phases]] == (
        ["department"] * 4 + [key for key in kinds[1:] for _ in range(2)])
    assert len(roomy) == 40
    mixed = [it for batch in roomy[phases:] for it in batch]
    department = 200 - 4 * train_demo.BATCH
    assert sum(it["key"] == "department" for it in mixed) == department
    assert len({(it["key"], it["i"]) for batch in roomy for it in batch}) == 40 * train_demo.BATCH
    tight = train_demo.curriculum(items, 2, random.Random(0), department_batches=4,
                                  max_batches=20)
    assert len(tight) == 20
    assert all(it["key"] == "department" for batch in tight[phases:] for it in batch)


def test_learning_rate_warms_up_stays_flat_through_the_phases_then_decays():
    warmup = train_demo.WARMUP
    factors = [train_demo.learning_rate_factor(step, 20, 40) for step in range(40)]
    assert factors[:warmup] == pytest.approx([(step + 1) / warmup for step in range(warmup)])
    assert factors[warmup:21] == [1.0] * (21 - warmup)
    assert all(a >= b for a, b in zip(factors[20:], factors[21:]))
    assert train_demo.learning_rate_factor(40, 20, 40) == pytest.approx(0.05)


def test_option_spans_average_over_each_options_words():
    import torch

    sep, mask = 102, 103
    # [CLS] head [SEP] [MASK] a b [MASK] c [SEP] state [SEP] | a row with three options, padded
    ids = torch.tensor([[101, 7, sep, mask, 11, 12, mask, 13, sep, 20, sep, 0],
                        [101, sep, mask, 11, mask, 12, 13, 14, mask, 15, sep, sep]])
    marker_pos = torch.tensor([[3, 6, 0], [2, 4, 8]])
    marker_mask = torch.tensor([[True, True, False], [True, True, True]])
    spans = train_demo.option_spans(ids, marker_pos, marker_mask, sep)
    assert spans.shape == (2, 3, 12)
    assert spans[0, 0].tolist() == [0, 0, 0, 0, 0.5, 0.5, 0, 0, 0, 0, 0, 0]
    assert spans[0, 1].tolist() == [0, 0, 0, 0, 0, 0, 0, 1.0, 0, 0, 0, 0]
    assert spans[0, 2].abs().sum() == 0  # a padded slot has no words
    assert spans[1, 1, 5:8].tolist() == pytest.approx([1 / 3] * 3)
    assert spans[1, 2].tolist() == [0] * 9 + [1.0, 0, 0]


def test_binding_loss_rewards_markers_that_carry_their_own_option():
    import torch

    torch.manual_seed(0)
    ids = torch.tensor([[101, 102, 103, 11, 103, 12, 13, 103, 14, 102, 20, 102]])
    marker_pos, marker_mask = torch.tensor([[2, 4, 7]]), torch.tensor([[True, True, True]])
    spans = train_demo.option_spans(ids, marker_pos, marker_mask, 102)
    encoded = torch.randn(1, 12, 32, requires_grad=True)
    options = torch.bmm(spans, encoded).detach()
    identity = torch.nn.Linear(32, 32)
    with torch.no_grad():
        identity.weight.copy_(torch.eye(32))
        identity.bias.zero_()
    bound = train_demo.binding_loss(options.clone().requires_grad_(), encoded, spans,
                                    marker_mask, identity)
    swapped = train_demo.binding_loss(options[:, [1, 2, 0]], encoded, spans, marker_mask,
                                      identity)
    assert bound.item() < 0.05 < 3.0 < swapped.item()
    swapped.backward()
    assert encoded.grad is None  # the options are targets: the loss moves only the markers
    assert identity.weight.grad is not None and identity.weight.grad.abs().sum() > 0


def test_the_handwritten_evaluation_maps_gold_answers_and_pools_kinds():
    """scripts/eval_handwritten.py: gold answers in the form `predicted` gives, the majority
    baseline, and per-kind figures pooled from the per-question ones by item count."""
    hand = load_file("scripts/eval_handwritten.py", "eval_handwritten")
    data = {"questions": {
        "team_names": {"gold": "team", "labels": {"pay": "Money", "fix": "Fixes"},
                       "question": {"type": "choice", "instructions": "q",
                                    "criteria": ["Money", "Fixes"]}},
        "money_back": {"gold": "money_back", "question": {"type": "noul", "instructions": "r"}}},
        "tickets": [{"text": "a", "team": "pay", "money_back": True},
                    {"text": "b", "team": "fix", "money_back": False},
                    {"text": "c", "team": "fix", "money_back": False}]}
    rows = hand.rows(data)
    assert [row["expected"] for row in rows] == [
        {"team_names": "Money", "money_back": True}, {"team_names": "Fixes", "money_back": False},
        {"team_names": "Fixes", "money_back": False}]
    base = hand.baselines(rows)
    assert base["team_names"] == {"answer": "Fixes", "accuracy": round(2 / 3, 4)}
    assert base["money_back"] == {"answer": False, "accuracy": round(2 / 3, 4)}
    metrics = {"by_question": {
        "money_back": {"n": 3, "accuracy": 1.0, "mean_confidence": 0.9, "ece": 0.1},
        "leaving": {"n": 1, "accuracy": 0.0, "mean_confidence": 0.5, "ece": 0.5}}}
    base["leaving"] = {"answer": False, "accuracy": 1.0}
    pooled = hand.by_kind(metrics, base, rows[:1] * 3, kinds={"yes/no": ["money_back",
                                                                         "leaving"]})
    assert pooled["yes/no"]["n"] == 4
    assert pooled["yes/no"]["accuracy"] == 0.75 and pooled["yes/no"]["ece"] == 0.2


def test_answers_by_question_are_the_answers_of_asking_each_row():
    """Batched one question at a time over the rows gives each row's own answers."""
    import laya_edge

    bundle = Path(__file__).resolve().parents[1] / "models" / train_demo.BUNDLE_NAME
    agent = laya_edge.ONNXAgent(str(bundle))
    rows = train_demo.splits(0, 0, 0, 6)["test"]
    batched = train_demo.answers_by_question(agent.predict_batch, rows)
    for row, answers in zip(rows, batched):
        alone = agent.system_one(row["state"], row["questions"])["answers"]
        assert answers.keys() == alone.keys()
        for key, answer in answers.items():
            assert answer["answer_confidence"] == pytest.approx(
                alone[key]["answer_confidence"], abs=2e-4)
            assert (train_demo.predicted(answer, row["questions"][key])
                    == train_demo.predicted(alone[key], row["questions"][key]))


def test_the_averaged_ensemble_answers_with_the_mean_probabilities():
    """scripts/eval_handwritten.py `averaged`: options by their mean probability, yes/no by the
    mean probability of "yes", confidence the mean's top probability."""
    hand = load_file("scripts/eval_handwritten.py", "eval_handwritten")
    questions = {"d": {"type": "choice"}, "u": {"type": "noul"}}

    def model(choice_a: float, yes: float):
        def predict_batch(states, asked):
            assert asked == questions
            return [{"answers": {"d": {"probabilities": {"a": choice_a, "b": 1 - choice_a},
                                       "answer_confidence": max(choice_a, 1 - choice_a)},
                                 "u": {"noul": yes, "answer_confidence": max(yes, 1 - yes)}}}
                    for _ in states]
        return predict_batch

    answers = hand.averaged([model(0.9, 0.2), model(0.3, 0.7)])(["s", "t"], questions)
    assert len(answers) == 2
    choice, yes_no = answers[1]["answers"]["d"], answers[1]["answers"]["u"]
    assert choice["probabilities"] == pytest.approx({"a": 0.6, "b": 0.4})
    assert choice["answer_confidence"] == pytest.approx(0.6)
    assert train_demo.predicted(choice, questions["d"]) == "a"  # the second model alone: "b"
    assert yes_no["noul"] == pytest.approx(0.45) and yes_no["answer_confidence"] == \
        pytest.approx(0.55)
    assert train_demo.predicted(yes_no, questions["u"]) is False


def test_a_checkpoint_twice_as_an_ensemble_scores_as_the_checkpoint(checkpoints, tmp_path):
    """eval_handwritten.py --checkpoint: upstream laya answers the hand-written questions; an
    ensemble of one model with itself gets its figures (confidences to the payload's rounding)."""
    hand = load_file("scripts/eval_handwritten.py", "eval_handwritten")
    data = hand.load_set(hand.FRESH_PATH)
    data["tickets"] = data["tickets"][:6]
    subset = tmp_path / "set.json"
    subset.write_text(json.dumps(data), encoding="utf-8")
    checkpoint = checkpoints["modernbert-tiny"]
    one = hand.evaluate_checkpoints([checkpoint], subset)
    two = hand.evaluate_checkpoints([checkpoint, checkpoint], subset)
    assert (one["precision"], two["precision"]) == ("fp32 (PyTorch)", "ensemble of 2 (PyTorch)")
    assert one["overall"]["n"] == 6 * len(data["questions"])
    for key, entry in one["by_question"].items():
        assert two["by_question"][key]["accuracy"] == entry["accuracy"]
        assert two["by_question"][key]["mean_confidence"] == pytest.approx(
            entry["mean_confidence"], abs=2e-4)
    with pytest.raises(SystemExit, match="checkpoint"):
        hand.main(["--checkpoint", str(checkpoint), "--write"])
