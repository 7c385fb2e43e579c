"""A toy prompter and one round of prompt-policy RL on it (spec envs-selfplay-eval.md 5 (b), (d)): the same
buffer, worker protocol, critic and call budget as the ``prompt_policy`` recipe, with a categorical policy
in numpy instead of an LM, so the loop's dynamics can be checked exactly and fast.

The prompter holds logits theta[c] (P,) per context over a fixed list of P candidate prompts. In refine
mode it reads a history H and adds ``kappa`` to the logit of H's best prompt (an in-context "keep what
worked" step, standing in for an LM's reading of its history); with H empty it is the one-shot policy
softmax(theta[c]). A round, per context (the spec's steps 1-6):

1. H <- the buffer's contrastive sample; G prompts drawn from pi(. | c, H).
2. Each scored by the worker on the same M instances (G * M calls): R_g = mean success.
3. Critiques of the failures; 4. everything into the buffer.
5. REINFORCE with the group baseline: A = group z-score of R (:func:`reasonrl.advantages.estimators.grpo`),
   theta[c] += lr / G * sum_g A_g grad log pi(p_g | c, H), grad = onehot(p_g) - pi(. | c, H).
6. Distillation: theta[c] += distill_lr * (onehot(p*) - softmax(theta[c])), the gradient of
   log pi(p* | c, {}) for the best prompt p* found so far: refinement amortised into one shot.
"""

from __future__ import annotations

import random
from typing import Sequence

import numpy as np
import torch

from ..advantages.estimators import grpo
from ..tasks import Item
from .buffer import Experience, ExperienceBuffer
from .workers import Critic, Worker, WorkerCalls

__all__ = ["CategoricalPrompter", "toy_round"]


class CategoricalPrompter:
    def __init__(self, contexts: Sequence[str], prompts: Sequence[str], kappa: float = 3.0):
        self.contexts, self.prompts, self.kappa = list(contexts), list(prompts), kappa
        self.theta = np.zeros((len(self.contexts), len(self.prompts)))  # (C, P): uniform at first

    def probs(self, context: str, history: Sequence[Experience] = ()) -> np.ndarray:
        """(P,) pi(. | c, H); H empty: the one-shot policy."""
        logits = self.theta[self.contexts.index(context)].copy()
        if history:
            best = max(history, key=lambda e: e.reward)  # H is sorted best first; max is order-proof
            logits[self.prompts.index(best.prompt)] += self.kappa
        z = np.exp(logits - logits.max())
        return z / z.sum()

    def sample(self, context: str, history: Sequence[Experience], g: int, rng: np.random.Generator) -> list[int]:
        return rng.choice(len(self.prompts), size=g, p=self.probs(context, history)).tolist()

    def reinforce(
        self, context: str, history: Sequence[Experience], picks: Sequence[int], adv: np.ndarray, lr: float
    ) -> None:
        """theta[c] += lr / G * sum_g A_g (onehot(p_g) - pi(. | c, H))."""
        pi = self.probs(context, history)  # (P,)
        grad = np.zeros_like(pi)
        for p, a in zip(picks, adv):
            grad += a * (np.eye(len(pi))[p] - pi)
        self.theta[self.contexts.index(context)] += lr * grad / len(picks)

    def distill(self, context: str, target: int, lr: float) -> None:
        """One ascent step on log pi(target | c, {}): theta[c] += lr (onehot(target) - softmax(theta[c]))."""
        pi = self.probs(context)
        self.theta[self.contexts.index(context)] += lr * (np.eye(len(pi))[target] - pi)


def toy_round(
    prompter: CategoricalPrompter,
    worker: Worker,
    critic: Critic,
    buffer: ExperienceBuffer,
    instances: dict[str, list[Item]],
    calls: WorkerCalls,
    rng: np.random.Generator,
    *,
    g: int,
    m: int,
    lr: float,
    distill_lr: float,
    k_top: int = 2,
    k_bottom: int = 2,
) -> dict[str, float]:
    """One round over every context; returns the mean refine-mode reward and the calls this round."""
    before, rewards = calls.calls, []
    for c in prompter.contexts:
        history = buffer.contrastive_sample(c, k_top, k_bottom, random.Random(int(rng.integers(2**31))))
        picks = prompter.sample(c, history, g, rng)
        batch = [instances[c][i] for i in rng.choice(len(instances[c]), size=m, replace=False)]
        res = calls.run(worker, [(prompter.prompts[p], it) for p in picks for it in batch])  # G * M calls
        r = np.array([np.mean([s for s, _ in res[k * m : (k + 1) * m]]) for k in range(g)])  # (G,)
        for k, p in enumerate(picks):
            mine = res[k * m : (k + 1) * m]
            note = critic.critique(prompter.prompts[p], [t for s, t in mine if s < 1])
            buffer.add(c, prompter.prompts[p], r[k], note, [s for s, _ in mine])
        adv = grpo(torch.tensor(r).view(1, -1)).view(-1).numpy()  # (G,) 0 when every R_g is equal
        prompter.reinforce(c, history, picks, adv, lr)
        if distill_lr:
            prompter.distill(c, prompter.prompts.index(buffer.best(c).prompt), distill_lr)
        rewards.append(float(r.mean()))
    return {"reward": float(np.mean(rewards)), "calls": float(calls.calls - before)}
