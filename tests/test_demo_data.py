"""The generated support tickets (scripts/demo_tickets.py) that train and evaluate the demo model:
answers that follow from the text, held-out wording the training family never uses, and
determinism."""
import pytest

from modules import load_file

tickets = load_file("scripts/demo_tickets.py", "demo_tickets")

POOLS = {"products": tickets.PRODUCTS, "churn": tickets.CHURN, "loyal": tickets.LOYAL,
         "refund": tickets.REFUND, "no_refund": tickets.NO_REFUND,
         "greetings": tickets.GREETINGS, "signoffs": tickets.SIGNOFFS, "names": tickets.NAMES,
         "order": tickets.ORDER, "repeated": tickets.REPEATED, "context": tickets.CONTEXT,
         **{f"issue {d}": tickets.ISSUES[d] for d in tickets.DEPARTMENTS},
         **{f"urgency {u}": tickets.URGENCY_PHRASES[u] for u in tickets.URGENCY},
         **{f"tone {s}": tickets.TONE[s] for s in tickets.SENTIMENTS},
         **{f"wording {q}": tickets.WORDINGS[q] for q in tickets.WORDINGS}}


@pytest.mark.parametrize("name", sorted(POOLS))
def test_every_pool_is_split_into_disjoint_families(name):
    pool = POOLS[name]
    assert set(pool) == set(tickets.FAMILIES)
    assert pool["train"] and pool["heldout"]
    assert not set(pool["train"]) & set(pool["heldout"])


def test_statements_are_worded_differently_per_family_over_the_same_facts():
    train = dict(tickets.STATEMENTS["train"])
    heldout = dict(tickets.STATEMENTS["heldout"])
    assert len(train) == len(tickets.STATEMENTS["train"])      # no wording twice
    assert not set(train) & set(heldout)
    assert set(train.values()) == set(heldout.values())


def test_heldout_rows_never_use_training_products_or_question_wordings():
    train_products = set(tickets.PRODUCTS["train"])
    train_wordings = ({w for pool in tickets.WORDINGS.values() for w in pool["train"]}
                      | {w for w, _ in tickets.STATEMENTS["train"]})
    for row in tickets.rows("heldout", 200, seed=0, every=True):
        assert not any(f" {product}" in row["state"] for product in train_products), row["state"]
        for question in row["questions"].values():
            assert question["instructions"] not in train_wordings


def _phrase_in(text, pool, family):
    """Whether one phrase of the pool (its fixed prefix, before any placeholder) is in text."""
    return any(phrase.split("{")[0] in text for phrase in pool[family])


@pytest.mark.parametrize("family", tickets.FAMILIES)
def test_expected_answers_follow_from_the_text(family):
    for row in tickets.rows(family, 300, seed=1, every=True):
        text, facts, expected = row["state"], row["facts"], row["expected"]
        assert _phrase_in(text, tickets.ISSUES[facts["department"]], family)
        assert _phrase_in(text, tickets.URGENCY_PHRASES[tickets.URGENCY[facts["urgency"]]],
                          family)
        assert _phrase_in(text, tickets.REFUND, family) == facts["refund"]
        assert _phrase_in(text, tickets.CHURN, family) == facts["churn"]
        if facts["churn"]:
            assert facts["sentiment"] == "negative"
        assert expected["department"] == facts["department"]
        assert expected["urgency"] == facts["urgency"]
        assert (expected["churn_risk"], expected["refund"]) == (facts["churn"], facts["refund"])
        assert expected["sentiment"] == facts["sentiment"]
        assert isinstance(expected["statement"], bool)
        assert len(row["questions"]) == 6


def test_training_rows_sample_four_questions_and_keep_the_answer_among_the_options():
    rows = tickets.rows("train", 300, seed=2)
    subsets = set()
    for row in rows:
        assert len(row["questions"]) == 4
        department = row["questions"].get("department")
        if department:
            options = list(department["criteria"])
            assert row["expected"]["department"] in options and len(options) >= 3
            subsets.add(len(options))
    assert subsets == {3, 4, 5}


def test_every_answer_occurs_and_rows_are_deterministic():
    rows = tickets.rows("train", 400, seed=3)
    seen = {(key, str(value)) for row in rows for key, value in row["expected"].items()}
    for department in tickets.DEPARTMENTS:
        assert ("department", department) in seen
    for level in range(4):
        assert ("urgency", str(level)) in seen
    for key in ("churn_risk", "refund", "statement"):
        assert {(key, "True"), (key, "False")} <= seen
    assert tickets.rows("train", 50, seed=3) == rows[:50]
    assert tickets.rows("train", 50, seed=4) != rows[:50]
    with pytest.raises(ValueError, match="family must be one of"):
        tickets.rows("test", 1, seed=0)
