"""Question heads are cached across calls: a repeated question skips the tokenizer, yet any
change to what a head is built from (wording, options, their order, the budget) builds anew."""
import dataclasses
import threading
from collections import OrderedDict

import pytest

from laya_edge import encode
from laya_edge.encode import Encoder
from laya_edge.questions import parse_questions

QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "charges", "shipping": "parcels"}},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
}


class CountingTokenizer:
    """The real tokenizer, counting the texts it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.texts = inner, 0

    def encode(self, text, **options):
        self.texts += 1
        return self.inner.encode(text, **options)

    def encode_batch(self, texts, **options):
        self.texts += len(texts)
        return self.inner.encode_batch(texts, **options)


def fresh(encoder, **changes):
    """A copy of `encoder` with its own, empty head cache."""
    return dataclasses.replace(encoder, _heads=OrderedDict(), _heads_lock=threading.Lock(),
                               **changes)


@pytest.fixture
def counted(checkpoints):
    real = Encoder.from_directory(checkpoints["minilm"] / "tokenizer")
    return real, fresh(real, tokenizer=CountingTokenizer(real.tokenizer))


def heads(encoder, questions, head_max_len=192):
    return {qid: encoder.head(q, head_max_len) for qid, q in parse_questions(questions).items()}


def test_a_repeated_question_is_not_tokenised_again(counted):
    real, encoder = counted
    first = heads(encoder, QUESTIONS)
    used = encoder.tokenizer.texts
    assert used > 0
    assert heads(encoder, QUESTIONS) == first
    assert encoder.tokenizer.texts == used
    assert first == heads(fresh(real), QUESTIONS)


@pytest.mark.parametrize("change", [
    lambda q: dict(q, instructions="Which department?"),
    lambda q: dict(q, criteria={"billing": "invoices", "shipping": "parcels"}),
    lambda q: dict(q, criteria={"shipping": "parcels", "billing": "charges"}),
    lambda q: dict(q, type="score", criteria=["billing", "shipping"]),
])
def test_a_changed_question_gets_its_own_head(counted, change):
    real, encoder = counted
    before = heads(encoder, {"dept": QUESTIONS["dept"]})["dept"]
    used = encoder.tokenizer.texts
    after = heads(encoder, {"dept": change(QUESTIONS["dept"])})["dept"]
    assert encoder.tokenizer.texts > used
    assert after != before
    assert after == heads(fresh(real),
                          {"dept": change(QUESTIONS["dept"])})["dept"]


def test_the_budget_is_part_of_the_key(counted):
    _, encoder = counted
    long = {"q": {"type": "choice", "instructions": "Pick one " * 20,
                  "criteria": [f"option number {i} " * 5 for i in range(12)]}}
    assert heads(encoder, long, 192)["q"] != heads(encoder, long, 48)["q"]


def test_the_cache_is_bounded_and_drops_the_oldest(counted, monkeypatch):
    _, encoder = counted
    monkeypatch.setattr(encode, "HEAD_CACHE_SIZE", 3)
    for i in range(5):
        heads(encoder, {"q": {"type": "noul", "instructions": f"Question {i}?"}})
    assert [key[1] for key in encoder._heads] == ["Question 2?", "Question 3?", "Question 4?"]


def test_threads_sharing_an_encoder_get_the_same_heads(counted):
    real, _ = counted
    encoder = fresh(real)
    expected = heads(fresh(real), QUESTIONS)
    results, errors = [], []

    def ask():
        try:
            for _ in range(50):
                results.append(heads(encoder, QUESTIONS))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(results) == 200 and all(r == expected for r in results)
