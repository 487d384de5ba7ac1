"""A minimal runtime over the shared lifecycle, so the hook rules can be tested without a model.

It follows the ONNXAgent call shape (construction stores the hook configuration, each call
resolves its own hooks and runs `run_predict`), with an inference step that answers each state
with its length and can be told to fail.
"""
from typing import Any, Dict, List, Optional

from laya_edge.hooks import HookRegistry, PredictContext
from laya_edge.lifecycle import run_predict


def toy_answer(state: Any) -> Dict[str, Any]:
    return {"model": "toy", "answers": {"len": len(str(state))},
            "usage": {"input_tokens": len(str(state)), "output_tokens": 1}}


class ToyRuntime(HookRegistry):
    model_id = None

    def __init__(self, model_id: str = "toy", fail_with: Optional[BaseException] = None,
                 **hook_options: Any):
        self._configure_hooks(**hook_options)
        self.model_id = model_id
        self.fail_with = fail_with
        self.inferred: List[List[Any]] = []

    def predict_batch(self, states, questions, *, hooks=None, on_predict_start=None,
                      on_predict_end=None, hooks_raise=None, hooks_timeout=None,
                      max_len=None, head_max_len=None):
        call = self._hook_call(hooks, on_predict_start, on_predict_end, hooks_raise,
                               hooks_timeout)
        ctx = PredictContext(states=states, questions=questions, model=self.model_id,
                             agent=self, max_len=max_len, head_max_len=head_max_len)
        return run_predict(call, ctx, self._infer)

    def system_one(self, state, questions, **kwargs):
        return self.predict_batch([state], questions, **kwargs)[0]

    def _infer(self, ctx: PredictContext) -> List[Dict[str, Any]]:
        if not ctx.states:  # as ONNXAgent: an empty call never reaches the model
            return []
        if self.fail_with is not None:
            raise self.fail_with
        self.inferred.append(list(ctx.states))
        return [toy_answer(state) for state in ctx.states]
