"""Sub-group and second-round maths: NudgeRL hint sub-groups, CIPO correction rounds, STRIDE redirection.

Pure functions; the generation rounds and prompt templates live above this layer.

* NudgeRL (arXiv 2605.15726, [code] tally0818/NudgeRL): rollouts of one prompt are split among M hint
  contexts and a bare "dropout" context; the advantage mixes a within-hint and a between-hint term.
* CIPO (arXiv 2605.14539): failures of moderately hard prompts get a second, "correct your attempt"
  round, with a risk-averse penalty for repeating the failed answer (rules [inferred]).
* STRIDE (arXiv 2605.18851): a generative verifier names the first wrong step; the generator keeps the
  steps before it and regenerates; redirected suffixes get a "harmless" (non-negative) advantage and
  the verifier is rewarded for agreement plus a useful localisation (rules [inferred]).
"""

from __future__ import annotations

import re
from typing import Sequence

import torch
from torch import Tensor

__all__ = [
    "nudge_advantages",
    "nudge_dropout_counts",
    "nudge_contexts",
    "cipo_select",
    "cipo_pick_failure",
    "cipo_reward",
    "cipo_rewards",
    "parse_first_error",
    "parse_verdict",
    "VERDICTS",
    "harmless_advantage",
    "verifier_reward",
]

VERDICTS = ("correct", "incorrect")


def nudge_advantages(rewards: Tensor, contexts: Tensor, lam: float = 1.1, eps: float = 1e-5) -> Tensor:
    """NudgeRL advantages over a prompt's hint sub-groups (arXiv 2605.15726, from the authors' trainer).

    Args:
        rewards: (B, G) rewards of all rollouts of each prompt.
        contexts: (B, G) long context id per rollout: 0 = bare / dropout prompt, j = 1..M = hint j.
        lam: between-hint weight ``adv_lbd`` (config 1.1; the class default is 0.1).
        eps: added to the population std.

    ``mu`` = mean over the prompt's rollouts, ``mu_c`` = mean of context c. Hinted rollout:
    ``a = (r - mu_c) + lam (mu_c - mu)``; dropout rollout: ``a = r - mu``. Then per prompt
    ``A = (a - mean a) / (std_pop a + eps)``. A context with no rollouts simply does not occur.
    """
    if rewards.dim() != 2 or contexts.shape != rewards.shape:
        raise ValueError(
            f"rewards and contexts must both be (B, G); got {tuple(rewards.shape)} and {tuple(contexts.shape)}"
        )
    if contexts.dtype.is_floating_point or contexts.dtype == torch.bool or bool((contexts < 0).any()):
        raise ValueError("contexts must be integer ids >= 0 (0 = bare prompt, j = hint j)")
    r = rewards.to(torch.float64) if not rewards.is_floating_point() else rewards  # (B, G)
    onehot = torch.nn.functional.one_hot(contexts.long()).to(r.dtype)  # (B, G, C+1)
    n_c = onehot.sum(dim=1)  # (B, C+1) rollouts per context
    mu_c = (onehot * r[:, :, None]).sum(dim=1) / n_c.clamp(min=1)  # (B, C+1) context means (0 where empty)
    mu_i = mu_c.gather(1, contexts.long())  # (B, G) each rollout's context mean
    mu = r.mean(dim=1, keepdim=True)  # (B, 1)
    a = torch.where(contexts > 0, (r - mu_i) + lam * (mu_i - mu), r - mu)  # (B, G)
    centred = a - a.mean(dim=1, keepdim=True)  # (B, G)
    return centred / (a.std(dim=1, keepdim=True, correction=0) + eps)


def nudge_dropout_counts(M: int, K: int, p_drop: float, generator: torch.Generator | None = None) -> list[int]:
    """Per hint j, ``d_j ~ Binomial(K, p_drop)`` of its K rollouts go to the bare prompt (NudgeRL, arXiv 2605.15726).

    Drawn as M x K Bernoulli(p_drop) coins from ``torch.rand`` on ``generator`` (deterministic given its
    state; spec default ``p_drop = 0.5``). Returns the M counts.
    """
    if M < 1 or K < 1 or not 0.0 <= p_drop <= 1.0:
        raise ValueError(
            f"nudge_dropout_counts needs M >= 1, K >= 1, 0 <= p_drop <= 1; got M={M}, K={K}, p_drop={p_drop}"
        )
    coins = torch.rand(M, K, generator=generator) < p_drop  # (M, K); rand in [0, 1): p=0 never, p=1 always
    return [int(c) for c in coins.sum(dim=1)]


def nudge_contexts(counts: Sequence[int], K: int) -> list[int]:
    """Context id per rollout of one group from the dropout counts (NudgeRL): M*K ids.

    Layout (our choice, the order the spec's example lists them): all bare rollouts first (id 0,
    ``sum d_j`` of them), then hint 1's ``K - d_1`` rollouts (id 1), hint 2's (id 2), and so on.
    """
    bad = [d for d in counts if not 0 <= int(d) <= K]
    if bad or not counts:
        raise ValueError(f"dropout counts must be a non-empty list of ints in [0, K={K}], got {list(counts)}")
    ids = [0] * sum(int(d) for d in counts)
    for j, d in enumerate(counts, start=1):
        ids += [j] * (K - int(d))
    return ids


def cipo_select(
    correct: Tensor, p_max: float = 0.75, q0: float = 0.5, generator: torch.Generator | None = None
) -> Tensor:
    """CIPO difficulty-aware failure selection (arXiv 2605.14539; thresholds [inferred]): (B, G) -> (B,) bool.

    A prompt with group accuracy ``0 < p <= p_max`` (default 0.75) is selected; one with ``p = 0`` is
    selected with probability ``q0`` (default 0.5; q0 = 0 never, q0 = 1 always), one uniform draw per
    prompt from ``generator`` (drawn for every prompt, so the stream advances by B whatever q0 is).
    """
    if correct.dim() != 2 or not 0.0 <= q0 <= 1.0 or not 0.0 < p_max <= 1.0:
        raise ValueError(
            f"cipo_select needs (B, G) correct, 0 < p_max <= 1, 0 <= q0 <= 1; got shape "
            f"{tuple(correct.shape)}, p_max={p_max}, q0={q0}"
        )
    p = correct.to(torch.float64).mean(dim=1)  # (B,)
    u = torch.rand(correct.shape[0], generator=generator, dtype=torch.float64)  # (B,)
    return ((p > 0) & (p <= p_max)) | ((p == 0) & (u < q0))


def cipo_pick_failure(correct: Tensor, selected: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """One failed rollout per selected prompt, uniformly at random (CIPO, m = 1): -> (B,) long, -1 if none.

    Args: correct (B, G) 0/1; selected (B,) bool from :func:`cipo_select`; one uniform score per
    rollout is drawn from ``generator`` and the highest-scoring wrong rollout is taken.
    """
    if correct.dim() != 2 or selected.shape != correct.shape[:1]:
        raise ValueError(
            f"cipo_pick_failure: correct (B, G) and selected (B,) expected, got "
            f"{tuple(correct.shape)} and {tuple(selected.shape)}"
        )
    wrong = correct == 0  # (B, G)
    score = torch.rand(correct.shape, generator=generator, dtype=torch.float64)  # (B, G)
    pick = torch.where(wrong, score, torch.full_like(score, -1.0)).argmax(dim=1)  # (B,)
    ok = selected.bool() & wrong.any(dim=1)  # (B,)
    return torch.where(ok, pick, torch.full_like(pick, -1))


def cipo_reward(correct: bool, answer: str | None, failed_answer: str | None, kappa: float = 0.5) -> float:
    """CIPO correction reward (arXiv 2605.14539; risk-averse shaping [inferred], spec kappa = 0.5).

    1 if the correction is correct; ``-kappa`` if it is wrong *and* repeats the failed attempt's final
    answer (``answer`` not None and equal to ``failed_answer``; answers compared as given, normalise
    them upstream); otherwise 0. ``kappa = 0`` is the plain 0/1 reward.
    """
    if kappa < 0:
        raise ValueError(f"cipo_reward kappa must be >= 0 (a penalty size), got {kappa}")
    if correct:
        return 1.0
    return -float(kappa) if answer is not None and answer == failed_answer else 0.0


def cipo_rewards(
    correct: Sequence[bool], answers: Sequence[str | None], failed_answer: str | None, kappa: float = 0.5
) -> Tensor:
    """:func:`cipo_reward` over one correction group (all share one failed attempt): -> (G_c,) float."""
    if len(correct) != len(answers):
        raise ValueError(f"cipo_rewards: {len(correct)} correctness flags but {len(answers)} answers")
    return torch.tensor(
        [cipo_reward(bool(c), a, failed_answer, kappa) for c, a in zip(correct, answers)],
        dtype=torch.get_default_dtype(),
    )


_FIRST_ERROR = re.compile(r"<first_error>(.*?)</first_error>", re.DOTALL)
_VERDICT = re.compile(r"<verdict>(.*?)</verdict>", re.DOTALL | re.IGNORECASE)


def parse_first_error(critique: str) -> int | None:
    """``k`` from the first ``<first_error>k</first_error>`` tag of a STRIDE critique (arXiv 2605.18851).

    Surrounding whitespace is allowed; anything else (no tag, "two", "2.5", 0, negatives) gives None.
    Only the first tag counts: a verifier that writes two answers does not get to pick one.
    """
    m = _FIRST_ERROR.search(critique)
    if m is None:
        return None
    body = m.group(1).strip()
    if not re.fullmatch(r"\d+", body):
        return None
    k = int(body)
    return k if k >= 1 else None


def parse_verdict(critique: str) -> str | None:
    """``"correct"`` / ``"incorrect"`` from the first ``<verdict>..</verdict>`` tag (case-insensitive), else None."""
    m = _VERDICT.search(critique)
    if m is None:
        return None
    v = m.group(1).strip().lower()
    return v if v in VERDICTS else None


def harmless_advantage(redirect_rewards: Tensor, baseline: float, harmless: bool = True) -> Tensor:
    """STRIDE advantage of redirected suffixes ``r(y') - b`` (arXiv 2605.18851; [inferred]): (n,) -> (n,).

    ``b`` = group mean of the *original* rollouts. ``harmless=True`` (default) clips negatives to 0, so a
    wrong critique can only fail to help, never push the generator down.
    """
    adv = redirect_rewards.to(torch.get_default_dtype()) - float(baseline)  # (n,)
    return adv.clamp(min=0.0) if harmless else adv


def verifier_reward(verdict: str | None, outcome_correct: bool, redirect_succeeded: bool, eta: float = 0.5) -> float:
    """STRIDE verifier reward ``1[verdict == truth] + eta * 1[redirect from k_hat succeeded]`` (arXiv 2605.18851).

    The truth is "correct" iff the outcome verifier accepted the trajectory; an unparseable verdict
    (None) earns 0 for agreement. ``eta`` (spec 0.5, [inferred]) rewards a useful localisation.
    """
    if verdict is not None and verdict not in VERDICTS:
        raise ValueError(f"verdict must be one of {VERDICTS} or None (see parse_verdict), got {verdict!r}")
    truth = "correct" if outcome_correct else "incorrect"
    return float(verdict == truth) + float(eta) * float(bool(redirect_succeeded))
