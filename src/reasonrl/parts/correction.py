"""CIPO's second round: on-policy corrections of the model's own failed attempts (arXiv 2605.14539).

After the ordinary GRPO round is rewarded, :class:`Correction` picks prompts by their group accuracy
(difficulty-aware, :func:`~reasonrl.advantages.cipo_select`), takes one failed rollout of each, builds
a correction prompt from the prompt and that attempt, samples G corrections, rewards them with the
same verifier (a wrong correction repeating the failed answer gets ``-kappa``, risk-averse shaping)
and adds them as extra groups: the recipe's estimator gives GRPO advantages within each correction
group, ``weight`` (lambda_c) multiplies them, and the loss's token mean runs over the joint batch.
An adaptive replay ratio ``rho`` caps the correction groups per batch and shrinks while corrections
fail. Every threshold and constant is [inferred] (the paper publishes no code): see the fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ..advantages.subgroups import cipo_pick_failure, cipo_rewards, cipo_select
from ..rollout import Rollouts, concat_rollouts
from ..config.rules import Rule, above, at_least, within
from ..seeds import stable_seed
from ..text import fill_slots
from .protocol import RoundContext, register_part
from .strategy import Groups

# The spec's correction prompt is x + "Previous attempt:" + y_fail + an instruction. Small models see
# only their task's prompt format, so the default repeats the prompt at the end: the correction prompt
# ends exactly as the task's own prompt does (arithmetic: "347+85=?\n") and the model answers as usual.
# The spec's "ending in \boxed{}" is dropped: each task's verifier has its own answer format.
DEFAULT_TEMPLATE = (
    "{prompt}Previous attempt:\n{attempt}\n"
    "The attempt above may be wrong. Find the error and give a corrected full solution.\n{prompt}"
)


def correction_prompt(template: str, prompt: str, attempt: str) -> str:
    """``template`` with ``{prompt}`` and ``{attempt}`` filled in one pass (:func:`reasonrl.text.fill_slots`)."""
    return fill_slots(template, prompt=prompt, attempt=attempt)


def replay_cap(rho_eff: float, n_main: int) -> int:
    """At most ``floor(rho_eff * n_main)`` correction groups (the 1e-9 absorbs 0.3 * 10 = 2.999...)."""
    return int(math.floor(rho_eff * n_main + 1e-9))


def next_rho(
    rho_eff: float, accuracy: float | None, *, rho: float, rho_min: float, acc_floor: float, factor: float
) -> float:
    """Adaptive replay [inferred]: correction accuracy below ``acc_floor`` divides the ratio by
    ``factor`` (not below ``rho_min``); at or above it the ratio grows by ``factor`` back to ``rho``.
    A step without corrections (``accuracy`` None) leaves it as it is."""
    if accuracy is None:
        return rho_eff
    return max(rho_min, rho_eff / factor) if accuracy < acc_floor else min(rho, rho_eff * factor)


def keep_at_most(candidates: torch.Tensor, k: int, generator: torch.Generator) -> torch.Tensor:
    """(B,) bool: ``k`` of the True entries of ``candidates`` (B,) chosen uniformly (all when fewer).
    The permutation is drawn every time, so the generator's stream does not depend on the count."""
    order = torch.randperm(len(candidates), generator=generator)  # (B,)
    ranked = order[candidates[order]][: max(k, 0)]  # the first k candidates in permuted order
    out = torch.zeros_like(candidates, dtype=torch.bool)
    out[ranked] = True
    return out


@register_part("correction")
@dataclass(frozen=True)
class Correction:
    """CIPO corrections as a second round (``extend``). Fields, all [inferred] spec defaults:

    ``p_max`` / ``q0``: prompts with group accuracy in (0, p_max] are picked, all-wrong ones with
    probability q0; one failed rollout (m = 1) of each, at random. ``kappa``: a wrong correction whose
    final answer repeats the failed attempt's gets ``-kappa`` instead of 0. ``weight``: lambda_c, the
    loss weight of correction rows. ``rho``: at most floor(rho * #first-round groups) correction groups
    per batch; while a step's correction accuracy is below ``acc_floor`` the ratio is divided by
    ``factor`` down to ``rho_min``, otherwise multiplied by it back up to ``rho`` (kept in the batch
    part's checkpointed state). ``template``: the correction prompt, with
    ``{prompt}`` and ``{attempt}`` slots; end it with ``{prompt}`` so that it ends as the task's prompt.
    """

    AFTER = ("hints",)  # the order it ran in before the order was declared (parts/registry.py)

    p_max: float = 0.75
    q0: float = 0.5
    kappa: float = 0.5
    weight: float = 1.0
    rho: float = 0.5
    rho_min: float = 0.125  # one group in 8, the default prompts_per_step
    acc_floor: float = 0.1
    factor: float = 2.0
    template: str = DEFAULT_TEMPLATE

    RULES: ClassVar[dict[str, Rule]] = {
        "p_max": within(0, 1, open_lo=True),
        "q0": within(0, 1),
        "kappa": at_least(0),
        "weight": above(0),
        "rho": within(0, 1, open_lo=True),
        "rho_min": Rule(lambda v, c: 0 <= v <= c.get("rho", 1), lambda c: f"in [0, correction.rho = {c.get('rho')}]"),
        "acc_floor": within(0, 1),
        "factor": Rule(lambda v, _: v >= 1, ">= 1 (1: a fixed replay ratio)"),
        "template": Rule(
            lambda v, _: "{prompt}" in v and "{attempt}" in v,
            "text with the slots {prompt} and {attempt} (end it with {prompt})",
        ),
    }

    def extend(self, ctx: RoundContext) -> tuple[Groups | None, dict[str, float]]:
        """Correction groups for this step's first-round groups (see the class docstring)."""
        batch = ctx.batch
        G = batch.rewards.shape[1]
        first = (batch.group_kinds() == 0).nonzero().squeeze(-1)  # (B0,) first-round groups
        st = ctx.state
        st.setdefault("rho_eff", self.rho)
        # keyed by the task position after this batch: the same choices in a resumed run
        gen = torch.Generator().manual_seed(stable_seed(ctx.seed, "cipo", ctx.position))
        correct = batch.correct[first]  # (B0, G)
        selected = cipo_select(correct, self.p_max, self.q0, gen)  # (B0,) bool
        pick = cipo_pick_failure(correct, selected, gen)  # (B0,) failed row in the group, -1: none
        chosen = keep_at_most(pick >= 0, replay_cap(st["rho_eff"], len(first)), gen)  # (B0,) bool
        idx = chosen.nonzero().squeeze(-1).tolist()
        metrics = {"cipo/selected": float(selected.sum()), "cipo/groups": float(len(idx)), "cipo/rho": st["rho_eff"]}
        if not idx:  # no group chosen for a correction: no groups, the counts still reported
            return None, metrics
        groups = [int(first[k]) for k in idx]
        items = [batch.items[g] for g in groups]
        failed = [batch.ro.texts[g * G + int(pick[k])] for g, k in zip(groups, idx)]
        prompts = [ctx.formatter.follow_up(it.prompt, self.template, y) for it, y in zip(items, failed)]
        # each correction prompt keyed by its group's task position (first-round groups end at items_drawn)
        ro = _generate(ctx, items, prompts, [ctx.position - len(first) + k for k in idx])
        rewards, ok, _ = ctx.reward(items, ro)  # (B', G) each; the reward metrics stay the first round's
        shaped, m = self.shape(
            ok,
            [[ctx.task.extract_answer(t) for t in ro.texts[i * G : (i + 1) * G]] for i in range(len(items))],
            [ctx.task.extract_answer(y) for y in failed],
        )
        st["rho_eff"] = next_rho(
            st["rho_eff"],
            m["cipo/accuracy"],
            rho=self.rho,
            rho_min=self.rho_min,
            acc_floor=self.acc_floor,
            factor=self.factor,
        )
        # preset None: the recipe's estimator (GRPO within each correction group); weight: lambda_c per row
        return Groups(
            items=items,
            ro=ro,
            rewards=rewards + shaped,
            correct=ok,
            weight=torch.full((len(items) * G,), float(self.weight)),
        ), {**metrics, **m}

    def shape(
        self, correct: torch.Tensor, answers: list[list[str | None]], failed_answers: list[str | None]
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The risk-averse term added to the verifier's reward: (B', G) ``-kappa`` where a wrong correction
        repeats its failed attempt's final answer, else 0 (:func:`cipo_rewards` less the 0/1 correctness,
        so a recipe's other reward terms are kept). Metrics: correction accuracy and the repeat rate
        (repeats among wrong corrections; 0 when none is wrong)."""
        rows = [cipo_rewards(c.bool().tolist(), a, f, self.kappa) for c, a, f in zip(correct, answers, failed_answers)]
        shaped = torch.stack(rows) - correct  # (B', G)
        wrong = correct == 0  # (B', G)
        repeat = torch.tensor([[a is not None and a == f for a in row] for row, f in zip(answers, failed_answers)])
        repeats = (repeat & wrong).sum()
        return shaped, {
            "cipo/accuracy": float(correct.mean()),
            "cipo/repeat_rate": float(repeats / wrong.sum()) if wrong.any() else 0.0,
        }


def _generate(ctx: RoundContext, items: list, prompts: list[str], positions: list[int]) -> Rollouts:
    """G samples per correction prompt, prompt ``i`` keyed by ``(positions[i], "cipo")``: one
    ``ctx.sample`` call per run of consecutive positions (the engine's samples of a prompt depend
    on its seed alone, so the split changes nothing)."""
    parts, start = [], 0
    for end in range(1, len(items) + 1):
        if end == len(items) or positions[end] != positions[end - 1] + 1:
            parts.append(ctx.sample(items[start:end], prompts[start:end], tag="cipo", first=positions[start]))
            start = end
    return concat_rollouts(parts, ctx.tok.pad_token_id)
