"""SAGE: reverse KL to a shaped anchor ``q * pi_ref`` (Lee, Kang, Hwang, arXiv 2605.18864).

Reverse KL to ``pi_ref`` keeps the policy inside the reference's high-density modes, which costs
pass@k. SAGE keeps the KL but moves its target: per token, the anchor becomes ``q_t * pi_ref``
with a guide ``q_t >= 0`` computed without gradient from the policy's own signals (mainly its
entropy), so at uncertain "branching" tokens the policy may rise above the reference by up to a
factor q. With ``u = l_ref + log max(q, 1e-8) - l`` the k3 estimate ``exp(u) - u - 1`` is minimal
at ``pi = q * pi_ref`` and its gradient in l is ``1 - q * pi_ref / pi``.

Guides (spec section 6, from the official code ``tally0818/SAGE``), all pure, all (N, T) -> (N, T)
and exactly 1 on padding:

* :func:`branch_guide` (the main variant): ``clamp(1 + ratio * relu(H - threshold), q_min, q_max)``.
* :func:`token_guide`: per-sequence normalised surprisal ``w in [0, 1]``,
  ``clamp(1 + alpha w + sigma w N(0,1), q_min, q_max)``.
* :func:`random_guide`: with probability eps, ``1 + sigma N(0,1)``, else 1 (clamped).

The stochastic guides take ``(alpha, sigma)`` / ``(eps, sigma)`` from :func:`cyclic_cosine`, a
pure function of the step; the official code keeps a scheduler object that advances once per
loss call (one loss call per optimiser step in its config: gradient_accumulation_steps=1) over
``max_steps`` = the run's optimiser steps, so pass the optimiser steps taken so far as ``step``.
Their random numbers are either drawn from a ``generator`` or passed in as ``draws``
(:func:`guide_draws`), so a trainer can draw them once per optimiser step for the whole batch and
hand each micro-batch its slice: the guide then does not depend on how the batch is split.
"""

from __future__ import annotations

import inspect
import math

import torch
from torch import Tensor

from .aggregate import Count, aggregate, check_agg, masked_mean

__all__ = [
    "SAGE_GUIDES",
    "SURPRISAL_NORMS",
    "SCHEDULE_UPPER",
    "SCHEDULE_LOWER",
    "cyclic_cosine",
    "guide_schedule",
    "guide_draws",
    "branch_guide",
    "surprisal_weights",
    "token_guide",
    "random_guide",
    "shaped_kl",
    "sage_guide",
    "sage_kl_loss",
]

SAGE_GUIDES = ("branch", "token", "random")
SURPRISAL_NORMS = ("minmax", "rank", "zscore")

# the official config's defaults (configs/train_config.yaml, section "sage")
SCHEDULE_UPPER = {"token": (0.3, 0.25), "random": (0.1, 0.15)}  # (alpha, sigma) / (eps, sigma) at a cycle's start
SCHEDULE_LOWER = {"token": (0.1, 0.1), "random": (0.0, 0.05)}  # ... and at its end
_SCHEDULE_NAMES = {"token": ("alpha", "sigma"), "random": ("eps", "sigma")}


def _on_padding_one(q: Tensor, mask: Tensor) -> Tensor:  # (N, T) -> (N, T)
    """q = 1 on padding, so only completion tokens are reshaped."""
    return torch.where(mask != 0, q, torch.ones_like(q))


def _check_q_range(q_min: float, q_max: float) -> None:
    if not 0 <= q_min <= q_max:
        raise ValueError(f"need 0 <= q_min <= q_max, got q_min={q_min}, q_max={q_max}")


def cyclic_cosine(
    step: int,
    *,
    max_steps: int,
    upper: tuple[float, float],
    lower: tuple[float, float],
    n_cycles: int = 8,
    decay: float = 0.9,
) -> tuple[float, float]:
    """The official cyclic cosine schedule of two values at ``step`` (0-based loss calls).

    The run is split into ``n_cycles`` cycles of ``max_steps // n_cycles`` steps. Within a cycle
    both values anneal by a half cosine from ``upper`` toward ``lower``; each new cycle starts from
    ``upper * decay^cycle`` (the decay stops after the last cycle, the cosine keeps cycling).
    """
    if n_cycles < 1 or max_steps < 1 or step < 0:
        raise ValueError(f"need n_cycles >= 1, max_steps >= 1, step >= 0; got {n_cycles}, {max_steps}, {step}")
    length = max(1, max_steps // n_cycles)
    cycle = min(step // length, n_cycles - 1)
    anneal = 0.5 * (1.0 + math.cos(math.pi * (step % length) / length))  # 1 at a cycle's start -> 0
    return tuple(lo + (hi * decay**cycle - lo) * anneal for hi, lo in zip(upper, lower))  # type: ignore[return-value]


def guide_schedule(
    guide: str,
    step: int,
    max_steps: int | None,
    *,
    n_cycles: int = 8,
    decay: float = 0.9,
    upper: tuple[float, float] | None = None,
    lower: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """``(alpha, sigma)`` (token guide) or ``(eps, sigma)`` (random guide) at ``step`` of ``max_steps``;
    ``upper`` / ``lower`` default to the official values of that guide."""
    if guide not in SCHEDULE_UPPER:
        raise ValueError(f"only the token and random guides have a schedule, got {guide!r}")
    if max_steps is None:
        raise ValueError(f"the {guide} guide's schedule needs max_steps (the run's number of optimiser steps)")
    return cyclic_cosine(
        step,
        max_steps=max_steps,
        upper=tuple(upper or SCHEDULE_UPPER[guide]),
        lower=tuple(lower or SCHEDULE_LOWER[guide]),
        n_cycles=n_cycles,
        decay=decay,
    )


def guide_draws(
    guide: str,
    shape: tuple[int, ...],
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> dict[str, Tensor]:
    """The random numbers guide ``guide`` consumes for a (N, T) batch: ``{}`` for the branch guide,
    ``{"normal"}`` (token) or ``{"uniform", "normal"}`` (random, drawn in that order), float32."""
    if guide not in SAGE_GUIDES:
        raise ValueError(f"unknown SAGE guide {guide!r}; valid values: {', '.join(SAGE_GUIDES)}")
    if device is None and generator is not None:
        device = generator.device
    out = {}
    if guide == "random":
        out["uniform"] = torch.rand(shape, generator=generator, dtype=torch.float32, device=device)
    if guide in ("token", "random"):
        out["normal"] = torch.randn(shape, generator=generator, dtype=torch.float32, device=device)
    return out


def _draws_for(
    guide: str, mask: Tensor, draws: dict[str, Tensor] | None, generator: torch.Generator | None
) -> dict[str, Tensor]:
    """``draws`` checked against ``mask`` (N, T), or fresh ones from ``generator``."""
    if draws is None:
        return guide_draws(guide, tuple(mask.shape), generator, mask.device if generator is None else None)
    need = set(guide_draws(guide, (0,)))
    if set(draws) != need or any(d.shape != mask.shape for d in draws.values()):
        raise ValueError(
            f"the {guide} guide needs draws {sorted(need)} of shape {tuple(mask.shape)}, got "
            f"{ {k: tuple(v.shape) for k, v in draws.items()} }"
        )
    return draws


@torch.no_grad()
def branch_guide(
    entropy: Tensor, mask: Tensor, *, ratio: float = 0.3, threshold: float = 1.2, q_min: float = 0.6, q_max: float = 1.4
) -> Tensor:  # (N, T) -> (N, T)
    """SAGE branch guide ``clamp(1 + ratio * relu(H - threshold), q_min, q_max)``.

    High-entropy tokens are the forks of a reasoning chain; letting the policy exceed the
    reference there is what buys exploration (SAGE §3). ``entropy`` is the current policy's token
    entropy (official default ``use_source="new"``); pass the reference's to use that instead.
    """
    _check_q_range(q_min, q_max)
    q = (1.0 + ratio * torch.relu(entropy.detach() - threshold)).clamp(q_min, q_max)
    return _on_padding_one(q, mask)


def _normalise_row(s: Tensor, norm: str) -> Tensor:  # (n,) -> (n,) in [0, 1]
    """One sequence's surprisals mapped to [0, 1] (official: minmax after a 5-95% quantile clip)."""
    if norm == "rank":
        return torch.argsort(torch.argsort(s)).to(s.dtype) / max(1, s.numel() - 1)
    if norm == "minmax":
        s = s.clamp(torch.quantile(s, 0.05), torch.quantile(s, 0.95))  # outliers would squash the rest
        return (s - s.min()) / (s.max() - s.min()).clamp(min=1e-6)
    std = s.std(correction=0).clamp(min=1e-6)
    return torch.sigmoid((s - s.mean()) / std)


@torch.no_grad()
def surprisal_weights(logp: Tensor, mask: Tensor, norm: str = "minmax") -> Tensor:  # (N, T) -> (N, T)
    """Per-sequence normalised surprisal ``-l`` over the masked tokens, 0 on padding."""
    if norm not in SURPRISAL_NORMS:
        raise ValueError(f"unknown surprisal norm {norm!r}; valid values: {', '.join(SURPRISAL_NORMS)}")
    on = mask != 0
    w = torch.zeros_like(logp, dtype=torch.float32 if not logp.is_floating_point() else logp.dtype)
    for i in range(logp.shape[0]):
        if bool(on[i].any()):
            w[i, on[i]] = _normalise_row(-logp[i, on[i]].detach().to(w.dtype), norm)
    return w.clamp(0.0, 1.0)


@torch.no_grad()
def token_guide(
    logp: Tensor,
    mask: Tensor,
    *,
    alpha: float,
    sigma: float,
    norm: str = "minmax",
    q_min: float = 0.6,
    q_max: float = 1.4,
    generator: torch.Generator | None = None,
    normal: Tensor | None = None,
) -> Tensor:  # (N, T) -> (N, T)
    """SAGE token guide ``clamp(1 + alpha w + sigma w N(0,1), q_min, q_max)``, w = normalised surprisal.

    ``logp`` are the token log-probs of the policy (official default ``use_source="new"``) or of
    the reference; take ``(alpha, sigma)`` from :func:`cyclic_cosine` (defaults upper (0.3, 0.25),
    lower (0.1, 0.1)). The N(0,1) draws are ``normal`` (N, T) if given, else drawn from ``generator``.
    """
    _check_q_range(q_min, q_max)
    w = surprisal_weights(logp, mask, norm)  # (N, T)
    noise = _draws_for("token", mask, None if normal is None else {"normal": normal}, generator)["normal"]
    q = (1.0 + alpha * w + sigma * w * noise.to(w.device, w.dtype)).clamp(q_min, q_max)
    return _on_padding_one(q, mask)


@torch.no_grad()
def random_guide(
    mask: Tensor,
    *,
    eps: float,
    sigma: float,
    q_min: float = 0.6,
    q_max: float = 1.4,
    generator: torch.Generator | None = None,
    draws: dict[str, Tensor] | None = None,
) -> Tensor:  # (N, T) -> (N, T)
    """SAGE random guide: ``q = 1 + sigma N(0,1)`` with probability ``eps``, else 1, clamped.

    The control that tells whether the entropy signal matters; schedule (eps, sigma) from
    (0.1, 0.15) down to (0.0, 0.05) with :func:`cyclic_cosine`. ``draws`` (``uniform`` and
    ``normal``, each (N, T)) are the random numbers if given, else they come from ``generator``.
    """
    _check_q_range(q_min, q_max)
    d = _draws_for("random", mask, draws, generator)
    hit = d["uniform"].to(mask.device) < eps  # (N, T)
    noise = 1.0 + sigma * d["normal"].to(mask.device)  # (N, T)
    q = torch.where(hit, noise, torch.ones_like(noise)).clamp(q_min, q_max)
    return _on_padding_one(q, mask)


def shaped_kl(logp: Tensor, ref_logp: Tensor, q: Tensor) -> Tensor:  # (N, T) -> (N, T)
    """k3 of ``KL(pi || q pi_ref)`` per token: ``exp(u) - u - 1`` with ``u = l_ref + log q - l``.

    q = 1 is the plain GRPO k3 KL (DeepSeekMath eq. 4). The floor ``1e-8`` on q is the official
    code's (a q of 0 would make the target -inf).
    """
    if not logp.shape == ref_logp.shape == q.shape:
        raise ValueError(
            f"logp, ref_logp and q must have one shape; got {tuple(logp.shape)}, "
            f"{tuple(ref_logp.shape)}, {tuple(q.shape)}"
        )
    u = ref_logp.detach() + torch.log(q.detach().clamp(min=1e-8)) - logp  # (N, T)
    return torch.expm1(u) - u  # = exp(u) - u - 1 without cancellation


def sage_guide(
    guide: str,
    logp: Tensor,
    ref_logp: Tensor,
    entropy: Tensor | None,
    mask: Tensor,
    *,
    q_min: float = 0.6,
    q_max: float = 1.4,
    ratio: float = 0.3,
    threshold: float = 1.2,
    step: int = 0,
    max_steps: int | None = None,
    n_cycles: int = 8,
    decay: float = 0.9,
    upper: tuple[float, float] | None = None,
    lower: tuple[float, float] | None = None,
    norm: str = "minmax",
    surprisal_source: str = "new",
    generator: torch.Generator | None = None,
    draws: dict[str, Tensor] | None = None,
) -> Tensor:  # -> (N, T)
    """The guide q (N, T) named by ``guide``, with the official defaults (see module doc).

    ``step`` / ``max_steps`` (optimiser steps) drive :func:`guide_schedule` for the stochastic
    guides, whose random numbers are ``draws`` (:func:`guide_draws`) or come from ``generator``;
    ``surprisal_source`` picks the policy's (``"new"``) or the reference's (``"ref"``) log-probs
    for the token guide.
    """
    if guide not in SAGE_GUIDES:
        raise ValueError(f"unknown SAGE guide {guide!r}; valid values: {', '.join(SAGE_GUIDES)}")
    if guide == "branch":
        if entropy is None:
            raise ValueError("the branch guide needs per-token entropies (N, T); got entropy=None")
        return branch_guide(entropy, mask, ratio=ratio, threshold=threshold, q_min=q_min, q_max=q_max)
    a, b = guide_schedule(guide, step, max_steps, n_cycles=n_cycles, decay=decay, upper=upper, lower=lower)
    if guide == "random":
        return random_guide(mask, eps=a, sigma=b, q_min=q_min, q_max=q_max, generator=generator, draws=draws)
    if surprisal_source not in ("new", "ref"):
        raise ValueError(f"surprisal_source must be 'new' or 'ref', got {surprisal_source!r}")
    source = logp if surprisal_source == "new" else ref_logp
    normal = None if draws is None else _draws_for("token", mask, draws, None)["normal"]
    return token_guide(
        source, mask, alpha=a, sigma=b, norm=norm, q_min=q_min, q_max=q_max, generator=generator, normal=normal
    )


@torch.no_grad()
def _sage_metrics(loss: Tensor, kl: Tensor, q: Tensor, mask: Tensor) -> dict[str, float]:
    on = mask != 0
    any_on = bool(on.any())
    return {
        "loss/kl": float(masked_mean(kl, mask)),
        "loss/kl_term": float(loss),
        "sage/q_mean": float(q[on].mean()) if any_on else 1.0,
        "sage/q_min": float(q[on].min()) if any_on else 1.0,
        "sage/q_max": float(q[on].max()) if any_on else 1.0,
        "sage/frac_shaped": float(masked_mean((q != 1).to(kl.dtype), mask)),
    }


def sage_kl_loss(
    logp: Tensor,
    ref_logp: Tensor,
    entropy: Tensor | None,
    mask: Tensor,
    *,
    coef: float,
    guide: str = "branch",
    q: Tensor | None = None,
    agg: str = "seq-mean-token-mean",
    norm_len: Count | None = None,
    n_tokens: Count | None = None,
    n_seqs: Count | None = None,
    **guide_options,
) -> tuple[Tensor, dict[str, float]]:
    """``coef * aggregate(shaped_kl(logp, ref_logp, q))`` over ``mask`` (all (N, T)); add it to the policy loss.

    Args:
        logp: (N, T) policy log-probs of the sampled tokens (carry the gradient).
        ref_logp: (N, T) reference log-probs (constant).
        entropy: (N, T) policy token entropies (detached here); needed by the branch guide only.
        coef: beta; the official config uses 0.05. SAGE is a no-op at 0.
        guide: ``"branch"`` (default), ``"token"`` or ``"random"``, built by :func:`sage_guide`
            with ``guide_options`` (q_min, q_max, ratio, threshold, step, max_steps, n_cycles,
            decay, upper, lower, norm, surprisal_source, generator, draws); or pass a precomputed
            ``q`` (N, T).
        agg: default ``"seq-mean-token-mean"``, the official config's TRL ``loss_type=grpo``;
            norm_len, n_tokens, n_seqs as in :func:`reasonrl.losses.aggregate.aggregate`.

    Metrics: ``loss/kl`` (token mean of the shaped k3, local), ``loss/kl_term`` (the returned
    loss), ``sage/q_mean``, ``sage/q_min``, ``sage/q_max`` over the masked tokens, and
    ``sage/frac_shaped`` (fraction of masked tokens with q != 1); with the token / random guide
    also the schedule's values, ``sage/alpha`` or ``sage/eps``, and ``sage/sigma``.
    """
    check_agg(agg, norm_len)
    valid = {n for n, prm in inspect.signature(sage_guide).parameters.items() if prm.kind is prm.KEYWORD_ONLY}
    unknown = set(guide_options) - valid
    if unknown:
        raise ValueError(f"unknown SAGE guide options {sorted(unknown)}; see sage_guide for the valid ones")
    for name, t in (("ref_logp", ref_logp), ("mask", mask), ("entropy", entropy), ("q", q)):
        if t is not None and t.shape != logp.shape:
            raise ValueError(f"{name} must have the shape of logp {tuple(logp.shape)}, got {tuple(t.shape)}")
    on = mask != 0
    # padding may hold -inf/NaN log-probs; exp of those would leak NaN into the gradient
    logp = torch.where(on, logp, torch.zeros_like(logp))
    ref_logp = torch.where(on, ref_logp.detach(), torch.zeros_like(ref_logp))
    built = q is None
    if built:
        q = sage_guide(guide, logp.detach(), ref_logp, entropy, mask, **guide_options)
    q = _on_padding_one(q.detach().to(logp.dtype), mask)  # (N, T)
    kl = shaped_kl(logp, ref_logp, q)  # (N, T)
    loss = coef * aggregate(kl, mask, agg, norm_len=norm_len, n_tokens=n_tokens, n_seqs=n_seqs)
    metrics = _sage_metrics(loss, kl, q, mask)
    if built and guide in _SCHEDULE_NAMES:  # the schedule's values at this step: the log shows the annealing
        keys = ("n_cycles", "decay", "upper", "lower")
        values = guide_schedule(
            guide,
            guide_options.get("step", 0),
            guide_options.get("max_steps"),
            **{k: guide_options[k] for k in keys if k in guide_options},
        )
        metrics.update({f"sage/{name}": v for name, v in zip(_SCHEDULE_NAMES[guide], values)})
    return loss, metrics
