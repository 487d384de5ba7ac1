"""Redact e-mail addresses and numbers before the model reads a state.

`redact_states` runs as an `on_predict_start` hook. It builds new states instead of
editing the caller's objects, and assigns them to `ctx.states`, so inference (and every
later hook) reads the redacted text while the caller's data stays as it was.
Importing this module only defines the hook.

    python examples/hooks/redact.py path/to/bundle
"""
import re
import sys

EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
# Runs of digits, with the separators phone, account and order numbers use inside them.
NUMBER = re.compile(r"\+?\d(?:[\d\s().\-/]*\d)?")


def redact(value):
    """Return a redacted copy of a state: strings are scrubbed, dicts and lists walked."""
    if isinstance(value, str):
        return NUMBER.sub("[number]", EMAIL.sub("[email]", value))
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def redact_states(ctx):
    ctx.states = [redact(state) for state in ctx.states]


def show(ctx):
    """A second start hook: it runs after redact_states, so it sees what the model will read."""
    for state in ctx.states:
        print("  model reads:", state)


STATES = [
    "Hi, I'm jane.doe@example.com, please refund order 4471-2290 to card ending 1881.",
    {"subject": "Call me back", "body": "My number is +49 30 1234567.", "from": "bob@mail.example.org"},
]
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}


def main(bundle):
    import laya_edge

    agent = laya_edge.load(bundle, on_predict_start=[redact_states, show])
    results = agent.predict_batch(STATES, QUESTIONS)
    for state, result in zip(STATES, results):
        print("caller still holds:", state)
        print("  answer:", {qid: answer.get("choice", answer.get("noul"))
                            for qid, answer in result["answers"].items()})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/hooks/redact.py BUNDLE_DIR")
    main(sys.argv[1])
