"""Requests to model inputs: the exact Laya sequence layout, budgets and numpy collation.

One row per (state, question):

    [CLS] <type> question: <instructions> [SEP] [MASK] opt0 [MASK] opt1 ... [SEP] state [SEP]

Question heads are tokenised once per distinct question and kept for later calls (services ask
the same questions again and again); all states of a call are tokenised in one batch call.
Nothing here mutates the tokenizer, and the head cache sits behind a lock, so encoding is
thread-safe.
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, NamedTuple, Optional, Sequence

from .bundle_format import MIN_MARKERS
from .controls import head_max_len_error, warn_head_max_len
from .questions import OPTION_TOKENS, Question, check_unicode, dumps_nested, render_options
from .tokenizer import SpecialToken, load_tokenizer, read_json, special_tokens

if TYPE_CHECKING:
    import numpy as np

INSTRUCTION_FLOOR = 8
OPTION_BUDGET_FLOOR = 16
OPTION_TOKEN_FLOOR = 4
HEAD_CACHE_SIZE = 512
# Applied after decoding by the oracle's tokenizer stack when a non-BPE tokenizer asks for it.
CLEAN_UP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
            (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class Head(NamedTuple):
    """A question's half of every row: token ids, marker positions and option statistics.

    Heads are cached and shared between calls and threads: nothing may mutate their lists.
    """

    ids: List[int]
    markers: List[int]
    options: int
    options_distinct: int
    tokens_per_option: Optional[int]
    # instruction tokens cut to fit head_max_len (upstream cuts them silently; we warn)
    instruction_dropped: int = 0


class Row(NamedTuple):
    ids: List[int]
    markers: List[int]
    qtype: int
    state_tokens: int
    state_tokens_dropped: int


def serialise_state(state: Any) -> str:
    """A state as the model reads it: strings verbatim, anything else as Python's JSON."""
    if isinstance(state, str):
        return state
    return dumps_nested(state, "the state", ensure_ascii=False)


@dataclass(frozen=True)
class Encoder:
    """Tokenisation and sequence building for one checkpoint's tokenizer."""

    tokenizer: Any
    cls: SpecialToken
    sep: SpecialToken
    pad: SpecialToken
    mask: SpecialToken
    keep_tail_of_options: bool
    clean_up_decoded: bool
    _heads: "OrderedDict[Any, Head]" = field(default_factory=OrderedDict, repr=False,
                                             compare=False)
    _heads_lock: Any = field(default_factory=threading.Lock, repr=False, compare=False)

    @classmethod
    def from_directory(cls, directory: Any) -> "Encoder":
        directory = Path(directory)
        tokenizer, stored_direction = load_tokenizer(directory)
        config = read_json(directory / "tokenizer_config.json")
        specials = special_tokens(directory, tokenizer, config)
        side = config.get("truncation_side") or stored_direction
        is_bpe = type(tokenizer.model).__name__ == "BPE"
        return cls(tokenizer, specials["cls"], specials["sep"], specials["pad"], specials["mask"],
                   keep_tail_of_options=str(side).lower() == "left",
                   clean_up_decoded=config.get("clean_up_tokenization_spaces") is True
                   and not is_bpe)

    def scrub(self, text: str) -> str:
        """Mask-injection defence: the mask token's text never reaches the model as a token."""
        return text.replace(self.mask.text, " ")

    def encode(self, text: str) -> List[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_many(self, texts: Sequence[str]) -> List[List[int]]:
        if len(texts) == 1:
            return [self.encode(texts[0])]
        return [encoding.ids for encoding in
                self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        text = self.tokenizer.decode(list(ids), skip_special_tokens=False)
        if self.clean_up_decoded:
            for before, after in CLEAN_UP:
                text = text.replace(before, after)
        return text

    def state_ids(self, states: Sequence[Any]) -> List[List[int]]:
        """Every state of a call tokenised in one batch call (the states are the long texts)."""
        return self.encode_many([check_unicode(self.scrub(serialise_state(state)),
                                               f"state {i}") for i, state in enumerate(states)])

    def head(self, question: Question, head_max_len: int) -> Head:
        """The question half of a row, with options cut to fit `head_max_len`; the last
        HEAD_CACHE_SIZE distinct heads are kept, so a repeated question is not re-tokenised."""
        texts = render_options(question)
        options = tuple(texts[i] for i in (question.option_order or range(len(texts))))
        key = (question.qtype, question.instructions, options, head_max_len)
        with self._heads_lock:
            head = self._heads.get(key)
            if head is not None:
                self._heads.move_to_end(key)
                return head
        head = self._build_head(question.qtype, question.instructions, options, head_max_len)
        with self._heads_lock:
            self._heads[key] = head
            if len(self._heads) > HEAD_CACHE_SIZE:
                self._heads.popitem(last=False)
        return head

    def _build_head(self, qtype: str, instructions: str, option_texts: Sequence[str],
                    head_max_len: int) -> Head:
        encoded = self.encode_many([f"{qtype} question: {self.scrub(instructions)}"]
                                   + [" " + self.scrub(text) for text in option_texts])
        instruction = encoded[0]
        options = [[self.mask.id] + (ids[-OPTION_TOKENS:] if self.keep_tail_of_options
                                     else ids[:OPTION_TOKENS]) for ids in encoded[1:]]
        budget = head_max_len - sum(len(option) for option in options)
        per_option = None
        if budget < OPTION_BUDGET_FLOOR:
            per_option = max(OPTION_TOKEN_FLOOR,
                             (head_max_len - OPTION_BUDGET_FLOOR) // max(1, len(options)))
            options = [option[:per_option] for option in options]
            budget = head_max_len - sum(len(option) for option in options)
        kept = instruction[:max(INSTRUCTION_FLOOR, budget)]
        ids = [self.cls.id] + kept + [self.sep.id]
        markers = []
        for option in options:
            markers.append(len(ids))
            ids.extend(option)
        ids.append(self.sep.id)
        return Head(ids, markers, len(options), len({tuple(option) for option in options}),
                    per_option, len(instruction) - len(kept))

    def row(self, head: Head, qtype: int, state_ids: List[int], keep_tail: bool,
            max_len: int) -> Row:
        """One (state, question) row: the head, as much of the state as fits, the closing SEP."""
        room = max(0, max_len - len(head.ids) - 1)
        kept = state_ids[max(0, len(state_ids) - room):] if keep_tail else state_ids[:room]
        ids = (head.ids + kept + [self.sep.id])[:max_len]
        markers = [m for m in head.markers if m < max_len]
        return Row(ids, markers, qtype, len(state_ids), len(state_ids) - len(kept))


def question_heads(encoder: Encoder, questions: Dict[Any, Question],
                   head_max_len: Any) -> Dict[Any, Head]:
    """Each question's head, once per call, warning about instructions cut to fit
    `head_max_len` (the answer is upstream's, from the instruction's first tokens only)."""
    warn_head_max_len(head_max_len)
    try:
        heads = {qid: encoder.head(question, head_max_len) for qid, question in questions.items()}
    except TypeError:
        error = head_max_len_error(head_max_len)
        if error is None:
            raise
        raise error from None
    for qid, head in heads.items():
        if head.instruction_dropped:
            warnings.warn(f"question {qid!r}: {head.instruction_dropped} instruction tokens do not "
                          f"fit in head_max_len={head_max_len} and are dropped, so the model reads "
                          "only the first part of the question; shorten it or raise head_max_len",
                          RuntimeWarning, stacklevel=3)
    return heads


def state_room(head: Head, max_len: int) -> int:
    """How many state tokens a question leaves inside `max_len` (the closing SEP counted)."""
    return max(0, max_len - len(head.ids) - 1)


def collate(rows: Sequence[Row], pad_id: int) -> Dict[str, np.ndarray]:
    """The graph's five inputs; the marker axis is at least 2 wide (the graph takes a top-2)."""
    import numpy as np

    n = len(rows)
    longest = max(len(row.ids) for row in rows)
    width = max(MIN_MARKERS, max(len(row.markers) for row in rows))
    input_ids = np.full((n, longest), pad_id, dtype=np.int64)
    attention_mask = np.zeros((n, longest), dtype=np.int64)
    marker_pos = np.zeros((n, width), dtype=np.int64)
    marker_mask = np.zeros((n, width), dtype=bool)
    for r, row in enumerate(rows):
        length, k = len(row.ids), len(row.markers)
        input_ids[r, :length] = row.ids
        attention_mask[r, :length] = 1
        marker_pos[r, :k] = row.markers
        marker_mask[r, :k] = True
    return {"input_ids": input_ids, "attention_mask": attention_mask, "marker_pos": marker_pos,
            "marker_mask": marker_mask,
            "qtype": np.fromiter((row.qtype for row in rows), dtype=np.int64, count=n)}


# What one extra session run costs, in padded tokens: below this, splitting a batch is not worth it.
RUN_OVERHEAD_TOKENS = 64
# Lengths are grouped in steps of this many tokens while planning, which keeps planning cheap.
LENGTH_STEP = 16


def length_groups(lengths: Sequence[int], max_tokens: Optional[int] = None,
                  max_rows: Optional[int] = None) -> List[List[int]]:
    """Row indices split into session runs of similar length, so less padding is computed.

    Each run pads to its longest row; the plan minimises padded tokens plus
    `RUN_OVERHEAD_TOKENS` per run (dynamic programming over rows sorted by length, their
    lengths rounded up to `LENGTH_STEP`). Runs are then cut so that none pads to more than
    `max_tokens` tokens (a row longer than that runs alone) nor holds more than `max_rows` rows:
    the device's run limits (laya_edge.accelerators.run_limits).
    """
    order = sorted(range(len(lengths)), key=lengths.__getitem__)
    steps = sorted({-(-lengths[i] // LENGTH_STEP) for i in order})
    count = {step: 0 for step in steps}
    for i in order:
        count[-(-lengths[i] // LENGTH_STEP)] += 1
    rows_before = [0]
    for step in steps:
        rows_before.append(rows_before[-1] + count[step])
    # best[j]: the cheapest plan for the rows of the first j steps; cut[j]: where its last run
    # starts.
    best, cut = [0.0], [0]
    for j in range(1, len(steps) + 1):
        padded = steps[j - 1] * LENGTH_STEP
        best.append(float("inf"))
        cut.append(0)
        for i in range(j):
            cost = best[i] + (rows_before[j] - rows_before[i]) * padded + RUN_OVERHEAD_TOKENS
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], len(steps)
    while j > 0:
        groups.append(order[rows_before[cut[j]]:rows_before[j]])
        j = cut[j]
    return [run for group in reversed(groups)
            for run in _cut(group, lengths, max_tokens, max_rows)]


def _cut(group: List[int], lengths: Sequence[int], max_tokens: Optional[int],
         max_rows: Optional[int]) -> List[List[int]]:
    """A run split into equal parts, each padding to at most `max_tokens` and holding at most
    `max_rows` rows."""
    longest = max(lengths[i] for i in group)
    per_run = len(group) if max_tokens is None else max(1, max_tokens // longest)
    per_run = per_run if max_rows is None else min(per_run, max(1, max_rows))
    if len(group) <= per_run:
        return [group]
    parts = -(-len(group) // per_run)
    size = -(-len(group) // parts)
    return [group[start:start + size] for start in range(0, len(group), size)]


def marker_overflow(qid: Any, row: Row, head: Head, max_len: int, head_max_len: int) -> str:
    return (f"question {qid!r}: only {len(row.markers)} of its {head.options} option markers fit "
            f"in max_len={max_len} with head_max_len={head_max_len} spent on the question; lower "
            "head_max_len, raise max_len, or use fewer options")


def encode_rows(encoder: Encoder, states: Sequence[Any], questions: Dict[Any, Question],
                heads: Dict[Any, Head], max_len: int, head_max_len: int) -> List[List[Row]]:
    """Each state's rows, in question order, for heads computed once per call."""
    per_state = []
    for state, ids in zip(states, encoder.state_ids(states)):
        keep_tail = isinstance(state, list)  # a conversation keeps its newest turns
        rows = []
        for qid, question in questions.items():
            head = heads[qid]
            row = encoder.row(head, question.qtype_id, ids, keep_tail, max_len)
            if len(row.markers) != head.options:
                raise ValueError(marker_overflow(qid, row, head, max_len, head_max_len))
            rows.append(row)
        per_state.append(rows)
    return per_state
