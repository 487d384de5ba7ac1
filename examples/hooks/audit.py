"""Keep an audit trail: one record per call, written from `on_predict_end`.

The end event fires exactly once per call, on success and on failure, after
`elapsed_ms` and `usage` are known, so it is the one place that sees the whole story.
Importing this module only defines the hook.

    python examples/hooks/audit.py path/to/bundle
"""
import json
import sys
import threading

from laya_edge import BaseHook


class AuditLog(BaseHook):
    """Appends one record per call to `self.records` and hands it to `write`, if given."""

    def __init__(self, write=None):
        self.records = []
        self.write = write
        self._lock = threading.Lock()   # one instance serves every thread of the runtime

    def on_predict_end(self, ctx):
        error = ctx.error
        record = {
            "run_id": ctx.run_id,
            "model": ctx.model,
            "reason": (ctx.decision or {}).get("reason"),   # set when a Router routed the call
            "states": len(ctx.states),
            "questions": list(ctx.questions or {}),
            "elapsed_ms": ctx.elapsed_ms,
            "usage": dict(ctx.usage) if ctx.usage is not None else None,
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        with self._lock:
            self.records.append(record)
        if self.write is not None:
            self.write(json.dumps(record, default=str))


STATE = "Our whole team is locked out since this morning, please help!"
QUESTIONS = {
    "dept": {"type": "choice", "instructions": "Which team should handle this ticket?",
             "criteria": ["billing", "tech", "sales"]},
    "urgent": {"type": "noul", "instructions": "Is this urgent?"},
}


def main(bundle):
    import laya_edge

    audit = AuditLog(write=print)
    agent = laya_edge.load(bundle, hooks=[audit])

    agent.system_one(STATE, QUESTIONS)
    agent.predict_batch([STATE, "How much is the pro plan?"], QUESTIONS)
    try:   # a question without instructions fails inside the call: the audit still sees it
        agent.system_one(STATE, {"dept": {"type": "choice", "criteria": ["billing", "tech"]}})
    except ValueError as exc:
        print("call failed as expected:", exc)

    print(f"{len(audit.records)} audit records, "
          f"{sum(r['error'] is not None for r in audit.records)} with an error")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/hooks/audit.py BUNDLE_DIR")
    main(sys.argv[1])
