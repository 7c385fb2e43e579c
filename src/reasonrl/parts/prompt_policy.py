"""Prompt-policy RL as one recipe part (prompt-policy RL by iterative distillation of experience; spec
envs-selfplay-eval.md 5): the trained model is a *prompter* that writes prompts for a frozen black-box
*worker*; the worker's success is its reward. Per step:

* ``wrap_task``: the run's task becomes the worker's (:class:`reasonrl.prompting.PromptTask`): an item is a
  context c with M instances, ``verify`` the worker's mean success R(p) with the prompter's prompt p (every
  worker call counted, and capped by ``max_worker_calls``).
* ``draw``: the step's contexts in turn, each prompter prompt conditioned on a history H, the contrastive
  sample of the experience buffer (k best, k worst, with scores and critiques); the first round samples
  G prompts per context (plain sampling) and the trainer's GRPO trains the prompter's tokens on R.
* ``score_batch``: every (c, p, R(p), critique, outcomes) goes into the buffer (the part's checkpointed
  state), keyed by the prompt the worker reads; the best prompt found so far per context becomes a
  distillation pair (history-free prompt, p*): by default the best running mean over every evaluation of a
  prompt, so a prompt the prompter writes again is re-evaluated (``target``; :mod:`reasonrl.prompting.buffer`).
* ``loss_term``: the distillation ``distill_coef * -mean_t log pi(p* | c, {})`` (a token mean per pair,
  averaged over the pairs; each pair computed in the micro-batch of one trained row), which amortises the
  refinement into one-shot prompting.

Held-out evaluation (the trainer's, or ``reasonrl eval``) prompts the prompter without history and scores
the worker on held-out instances.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from ..errors import UserError
from ..losses.dpo import sft_nll
from ..models.scoring import score_completions, trim_padding
from ..prompting.buffer import TARGETS, ExperienceBuffer
from ..prompting.task import RENDERERS, PromptTask, prompter_prompt
from ..prompting.workers import FailureCritic, load_worker
from ..config.rules import Rule, at_least, one_of
from ..seeds import stable_seed
from ..tasks import Item
from ..tasks.limits import played_task
from .fest import anchors, encode_demos
from ..tasks.protocols import WithHints
from .protocol import BatchContext, LossContext, RoundContext, TaskSetup, register_part

__all__ = ["PromptPolicy"]

CRITICS = ("failures", "none")


@register_part("prompt_policy")
@dataclass(frozen=True)
class PromptPolicy:
    """Options (all [inferred] but the structure; see the recipe)."""

    PHASE = "selfplay"

    worker: str = "base"  # base | a model directory or hub id | module:attr (a Worker or a function)
    contexts: str = "task"  # task (one context) | meta:f1,f2 (instances grouped by those meta fields)
    instances: int = 4  # M: instances each prompt is scored on
    renderer: str = "hints"  # hints (digits pick the task's hints) | text (the first line, verbatim)
    max_fragments: int = 2
    template: str = "{prompt}\n{instance}"  # what the worker reads (the instance alone for an empty prompt)
    k_top: int = 2  # the history: the k_top best and k_bottom worst entries of the context
    k_bottom: int = 2
    capacity: int = 64  # buffer entries per context
    critic: str = "failures"  # failures (the first failed trace) | none
    distill_coef: float = 1.0
    target: str = "mean"  # p*: the best running mean of a prompt's evaluations | first_max (the first top R, pre-#41)
    max_worker_calls: int = 0  # 0: no cap
    pool: int = 256  # instances read from each split of the worker task (grouped into contexts)

    @property
    def task_needs(self) -> tuple[type, ...]:
        return (WithHints,) if self.renderer == "hints" else ()  # the prompter's digits pick the task's hints

    RULES: ClassVar[dict[str, Rule]] = {
        "instances": at_least(1),
        "max_fragments": at_least(1),
        "k_top": at_least(0),
        "k_bottom": at_least(0),
        "capacity": at_least(1),
        "distill_coef": at_least(0),
        "pool": at_least(1),
        "renderer": one_of(RENDERERS),
        "critic": one_of(CRITICS),
        "target": one_of(TARGETS),
        "contexts": Rule(lambda v, _: v == "task" or (v.startswith("meta:") and len(v) > 5), "task or meta:FIELD,..."),
        "template": Rule(lambda v, _: "{prompt}" in v and "{instance}" in v, "a text with {prompt} and {instance}"),
        # the run's worker calls: steps x prompts_per_step x group_size x instances must fit the cap
        "max_worker_calls": Rule(
            lambda v, c: v == 0 or v >= _planned(c),
            lambda c: (
                f"0 (no cap) or >= the run's {_planned(c)} calls (steps x prompts_per_step x group_size x instances)"
            ),
        ),
    }

    # ---------------------------------------------------------------- the worker's task
    def wrap_task(self, ctx: TaskSetup) -> tuple[PromptTask, dict[str, float]]:
        if isinstance(ctx.task, PromptTask):
            return ctx.task, {}
        worker = load_worker(self.worker, ctx.task, self.template)
        task = PromptTask(
            ctx.task,
            worker,
            contexts=self.contexts,
            instances=self.instances,
            renderer=self.renderer,
            max_fragments=self.max_fragments,
            pool=self.pool,
            budget=self.max_worker_calls,
            seed=ctx.seed,
        )
        return task, {}

    def _task(self, ctx: Any) -> PromptTask:
        return played_task(
            ctx.task,
            PromptTask,
            "recipe part 'prompt_policy' needs its wrapped task (Recipe.wrap_task): the run builds it",
        )

    def _buffer(self, state: dict) -> ExperienceBuffer:
        if "buffer" not in state:
            return ExperienceBuffer(self.capacity, self.target)
        buf = ExperienceBuffer.from_state(state["buffer"])
        if buf.target != self.target:  # a resumed run: its buffer holds one kind of estimate
            raise UserError(
                f"prompt_policy.target={self.target}, but the run's experience buffer ranks its "
                f"distillation target by {buf.target} (a checkpoint from before issue 41 ranks by "
                f"first_max): resume with prompt_policy.target={buf.target}"
            )
        return buf

    # ---------------------------------------------------------------- the prompter's prompts
    def draw(self, ctx: RoundContext, n: int) -> tuple[list[Item], dict[str, float]]:
        """``n`` prompter items: contexts in turn by task position, each with its history and M instances."""
        task, buf = self._task(ctx), self._buffer(ctx.state)
        planned = ctx.state.get("worker_calls", 0) + n * ctx.group_size * self.instances
        if self.max_worker_calls and planned > self.max_worker_calls:
            raise UserError(
                f"prompt_policy.max_worker_calls={self.max_worker_calls} would be passed at step "
                f"{ctx.step + 1} ({planned} calls): raise it or train fewer steps"
            )
        items = []
        for i in range(n):
            pos = ctx.position + i
            c = task.contexts[pos % len(task.contexts)]
            history = buf.contrastive_sample(
                c, self.k_top, self.k_bottom, random.Random(stable_seed(ctx.seed, "prompt-history", pos))
            )
            insts = task.instances(c, stable_seed(ctx.seed, "prompt-instances", pos))
            items.append(task.item(c, history, insts, f"{c}|{pos}"))
        return items, {}

    # ---------------------------------------------------------------- the buffer and the distillation pairs
    def score_batch(self, ctx: BatchContext) -> tuple[None, dict[str, float]]:
        task, buf, G = self._task(ctx), self._buffer(ctx.state), ctx.rewards.shape[1]
        critic = FailureCritic() if self.critic == "failures" else None
        calls = 0
        for b, item in enumerate(ctx.items):
            c, insts = item.meta["context"], item.meta["instances"]
            for g in range(G):
                text = ctx.rollouts.texts[b * G + g]
                res = task.results(text, insts)  # the worker's results of this step (no new call)
                note = critic.critique(text, [t for s, t in res if s < 1]) if critic else ""
                buf.add(
                    c, text, sum(s for s, _ in res) / len(res), note, [s for s, _ in res], key=task.prompt_key(text)
                )
                calls += len(insts)
        ctx.state["buffer"] = buf.state_dict()
        ctx.state["worker_calls"] = ctx.state.get("worker_calls", 0) + calls
        contexts = list(dict.fromkeys(it.meta["context"] for it in ctx.items))
        best = [buf.best(c) for c in contexts]
        if self.distill_coef > 0:
            ctx.data.values["distill"] = encode_demos(
                ctx.tok, [prompter_prompt(c, []) for c in contexts], [e.prompt for e in best]
            )
        texts = ctx.rollouts.texts
        empty = sum(not task.render(t, ctx.items[r // G].meta["instances"][0]) for r, t in enumerate(texts))
        return None, {
            "prompt_policy/worker_calls": float(ctx.state["worker_calls"]),
            "prompt_policy/calls_step": float(calls),
            "prompt_policy/best_reward": sum(e.reward for e in best) / len(best),
            "prompt_policy/best_evaluations": sum(e.evaluations for e in best) / len(best),
            "prompt_policy/history_len": sum(it.meta["history"] for it in ctx.items) / len(ctx.items),
            "prompt_policy/buffer": float(len(buf)),
            "prompt_policy/empty_prompt_frac": empty / len(texts),
        }

    def loss_term(self, ctx: LossContext) -> tuple[Tensor, dict[str, float]]:
        """``distill_coef`` x the mean over pairs of -mean_t log pi(p* | c, {}); pair j is computed in the
        micro-batch of its anchor row, so any micro-batch split gives the same total."""
        pairs = ctx.data.values.get("distill")
        zero = torch.zeros((), device=ctx.logp.device)
        if pairs is None:
            return zero, {}
        n = len(pairs.prompt_ids)
        here = torch.isin(anchors(ctx.batch.loss_mask, n), ctx.rows.cpu()).nonzero().squeeze(-1)  # (k,)
        if not len(here):
            return zero, {"prompt_policy/distill_term": 0.0}
        t = pairs.rows(here)
        p_ids, p_mask, c_ids, c_mask = trim_padding(t.prompt_ids, t.prompt_mask, t.completion_ids, t.completion_mask)
        lp, _ = score_completions(
            ctx.model, p_ids, p_mask, c_ids, c_mask, temperature=ctx.temperature, chunk_rows=len(here), entropies=False
        )  # (k, T) with grad
        loss = self.distill_coef * sft_nll(lp, c_mask.to(lp.device)).sum() / n
        return loss, {"prompt_policy/distill_term": float(loss.detach())}


def _planned(c) -> int:
    """The worker calls a run makes: steps x prompts_per_step x group_size x instances (from the config)."""
    return (
        int(c.get("steps", 0) or 0)
        * int(c.get("prompts_per_step", 0) or 0)
        * int(c.get("group_size", 0) or 0)
        * int(c.get("instances", 0) or 0)
    )
