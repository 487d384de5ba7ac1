"""Answer repeated questions from an in-process cache.

`cache_read` runs as an `on_predict_start` hook and answers the whole call with
`ctx.skip(...)` when every state is already cached; `cache_write` runs as an
`on_predict_end` hook and stores what the model answered. Importing this module only
defines the hooks.

    python examples/hooks/cache.py path/to/bundle
"""
import hashlib
import json
import sys

CACHE = {}


def key(ctx, index):
    # Not sort_keys=True: criteria order is positional, so two orders are two questions,
    # and the checkpoint and token budget change the answer too.
    payload = json.dumps([ctx.states[index], ctx.questions, ctx.model,
                          ctx.max_len, ctx.head_max_len], default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def cache_read(ctx):
    hits = [CACHE.get(key(ctx, i)) for i in range(len(ctx.states))]
    if all(hit is not None for hit in hits):
        ctx.skip(hits)   # one entry per state, same shape as predict_batch's return


def cache_write(ctx):
    for i, result in enumerate(ctx.results or []):
        CACHE[key(ctx, i)] = result


STATES = ["My invoice was charged twice this month.",
          "The app crashes when I open settings."]
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}


def report(ctx):
    """An extra end hook that prints what each call looked like by the time it ended."""
    print(f"  run {ctx.run_id[:8]}: {len(ctx.states)} state(s), "
          f"{ctx.elapsed_ms:.1f} ms, usage={ctx.usage}, cache size={len(CACHE)}")


def main(bundle):
    import laya_edge

    agent = laya_edge.load(bundle, on_predict_start=cache_read,
                           on_predict_end=[cache_write, report])

    print("first call (cache empty, the model runs):")
    first = agent.predict_batch(STATES, QUESTIONS)
    print("same call again (every state hits, no forward pass):")
    second = agent.predict_batch(STATES, QUESTIONS)
    print("  answered from the cache:", all(a is b for a, b in zip(first, second)))

    reordered = dict(QUESTIONS, dept=dict(QUESTIONS["dept"], criteria=["sales", "tech", "billing"]))
    print("criteria in another order (a different question, so a miss):")
    agent.predict_batch(STATES, reordered)

    print("one known state and one new state (partial hit, the model runs):")
    agent.predict_batch([STATES[0], "Can I get a discount for 50 seats?"], QUESTIONS)

    answer = agent.system_one(STATES[0], QUESTIONS)   # a one-state call hits the same entry
    print("system_one answer for the first state:", answer["answers"]["dept"].get("choice"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/hooks/cache.py BUNDLE_DIR")
    main(sys.argv[1])
