"""Self-teacher maths: SSOPD pair selection and frontier weight, EGRSD / CL-EGRSD token weights.

Pure functions on tensors; no model. The teacher in both methods is the policy itself under a
privileged context; its forward pass (and the divergence of SSOPD, :mod:`.divergence`) live elsewhere.

* SSOPD (Self-Supervised On-Policy Distillation, arXiv 2605.17497): in a *mixed* group the shortest
  correct completion ``c*`` becomes the teacher's context and the longest wrong completion ``w*`` is
  where the teacher is distilled into the student (selection rule: abstract). The prompt is weighted
  by a frontier weight that is 0 for all-correct / all-wrong groups (its existence: abstract; its form:
  [inferred], default ``4p(1-p)``, option ``"mixed"`` = ``1[0<p<1]``).
* EGRSD (Entropy-Guided Reinforced Self-Distillation, arXiv 2605.13255): token weight
  ``a_{i,t} = A_i * m_t * g_t`` = direction x teacher/student disagreement x entropy gate with a floor
  (three-factor structure, floor and lookahead: abstract; every functional form below: [inferred]
  with the spec's defaults ``M = 5``, ``g_min = 0.1``, ``tau = 1`` nat, CL window ``K = 8``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "FRONTIER_FORMS",
    "MAGNITUDE_FORMS",
    "DIRECTIONS",
    "ssopd_pairs",
    "frontier_weight",
    "egrsd_gate",
    "lookahead_entropy",
    "egrsd_magnitude",
    "egrsd_token_weights",
]

FRONTIER_FORMS = ("4p(1-p)", "mixed")
MAGNITUDE_FORMS = ("abs", "ratio")
DIRECTIONS = ("advantage", "sign")


def _binary(correct: Tensor, name: str = "correct") -> Tensor:  # (B, G) -> (B, G) bool
    """Validate a (B, G) 0/1 (or bool) tensor and return it as bool."""
    if not isinstance(correct, Tensor) or correct.dim() != 2:
        raise ValueError(
            f"{name} must be a (B, G) tensor of 0/1, got "
            f"{tuple(correct.shape) if isinstance(correct, Tensor) else type(correct).__name__}"
        )
    if correct.dtype != torch.bool and not bool(((correct == 0) | (correct == 1)).all()):
        raise ValueError(f"{name} must hold only 0 and 1 (binary verifier rewards); threshold them first")
    return correct.bool()


def _same_shape(**tensors: Tensor) -> None:
    shapes = {k: tuple(v.shape) for k, v in tensors.items()}
    if len(set(shapes.values())) != 1 or len(next(iter(shapes.values()))) != 2:
        raise ValueError(f"expected (N, T) tensors of one shape, got {shapes}")


def ssopd_pairs(correct: Tensor, lengths: Tensor, eligible: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """SSOPD's (shortest correct, longest wrong) pair per group (arXiv 2605.17497, rule from the abstract).

    Args:
        correct: (B, G) 0/1 outcome per rollout.
        lengths: (B, G) completion lengths (tokens).
        eligible: (B, G) bool, the rows that may be w* (None: every wrong row). ``ssopd.w_star=eos``
            passes the rows that ended by EOS: a truncated row is the longest by construction, so
            without this rule w* is a runaway whenever one exists (issue #26, docs/selfteach.md).

    Returns ``(c_star, w_star)``, each (B,) long: ``c* = argmin_{i correct} |y_i|`` and
    ``w* = argmax_{i wrong, eligible} |y_i|``, ties to the lowest index (``torch.argmin``/``argmax``
    return the first extremum); both are -1 in a group without a correct or an eligible wrong rollout.
    """
    ok = _binary(correct)  # (B, G)
    if lengths.shape != ok.shape or (eligible is not None and eligible.shape != ok.shape):
        raise ValueError(
            f"lengths {tuple(lengths.shape)} and eligible "
            f"{None if eligible is None else tuple(eligible.shape)} must match correct {tuple(ok.shape)}"
        )
    wrong = ~ok if eligible is None else ~ok & eligible.bool()  # (B, G) candidates for w*
    lens = lengths.to(torch.float64)  # (B, G) exact for any realistic integer length
    c_idx = torch.where(ok, lens, torch.full_like(lens, math.inf)).argmin(dim=1)  # (B,)
    w_idx = torch.where(wrong, lens, torch.full_like(lens, -math.inf)).argmax(dim=1)  # (B,)
    mixed = ok.any(dim=1) & wrong.any(dim=1)  # (B,)
    none = torch.full_like(c_idx, -1)
    return torch.where(mixed, c_idx, none), torch.where(mixed, w_idx, none)


def frontier_weight(correct: Tensor, form: str = "4p(1-p)") -> Tensor:
    """SSOPD prompt weight from the group pass rate p (arXiv 2605.17497): (B, G) -> (B,).

    ``"4p(1-p)"`` (spec default, [inferred] form): 1 at p = 1/2, 0.75 at p = 1/4, exactly 0 at p in {0, 1}.
    ``"mixed"`` ([inferred] option): ``1[0 < p < 1]``.
    """
    if form not in FRONTIER_FORMS:
        raise ValueError(f"unknown frontier form {form!r}; valid: {', '.join(FRONTIER_FORMS)}")
    ok = _binary(correct)  # (B, G)
    p = ok.to(torch.get_default_dtype()).mean(dim=1)  # (B,)
    if form == "mixed":
        return ((p > 0) & (p < 1)).to(p.dtype)
    return 4.0 * p * (1.0 - p)


def egrsd_gate(entropy: Tensor, g_min: float = 0.1, tau: float = 1.0) -> Tensor:
    """EGRSD confidence gate ``g = g_min + (1 - g_min) exp(-H / tau)`` (arXiv 2605.13255; form [inferred]).

    (N, T) teacher entropies (nats) -> (N, T) gates in ``[g_min, 1]``. ``H = inf`` gives exactly
    ``g_min`` (the floor: no token is silenced). A tiny negative entropy (rounding) is read as 0 so
    the gate never exceeds 1. NaN entropy is an upstream bug and raises.
    """
    if not 0 < g_min <= 1 or not tau > 0:
        raise ValueError(f"egrsd_gate needs 0 < g_min <= 1 and tau > 0, got g_min={g_min}, tau={tau}")
    if bool(torch.isnan(entropy).any()):
        raise ValueError("egrsd_gate: the teacher entropy holds NaN; fix the teacher forward (or fill padding)")
    h = entropy.clamp(min=0)  # (N, T)
    return g_min + (1.0 - g_min) * torch.exp(-h / tau)


def lookahead_entropy(entropy: Tensor, mask: Tensor, window: int = 8) -> Tensor:
    """CL-EGRSD effective entropy ``H_hat_t = min(H_t, mean of the next up-to-K real tokens' H)``.

    (N, T) entropies and (N, T) mask -> (N, T) (arXiv 2605.13255; lookahead idea from the abstract,
    window mean and ``min`` [inferred], default ``K = 8``). "Next" counts real (masked-in) tokens
    only, so right padding (or any hole) is skipped per row; a row's last real token has no
    successor and keeps ``H_T``. Positions outside the mask keep their input value. Inf entropies are
    handled without NaN (the window sum uses ``where``, not a cumulative difference).
    """
    if window < 1:
        raise ValueError(f"lookahead window must be >= 1 (use lookahead=0 upstream for plain EGRSD), got {window}")
    _same_shape(entropy=entropy, mask=mask)
    real = mask.bool()  # (N, T)
    n, t = entropy.shape
    # compact each row's real tokens to the left (stable, so their order is kept)
    order = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices  # (N, T) positions, real first
    h_c = entropy.gather(1, order)  # (N, T) compacted entropies
    count = real.sum(dim=1, keepdim=True)  # (N, 1) real tokens per row
    k = torch.arange(1, window + 1, device=entropy.device)  # (K,)
    u = torch.arange(t, device=entropy.device)  # (T,) rank of a compacted token
    nxt = u[:, None] + k[None, :]  # (T, K) ranks of the successors
    valid = nxt[None] < count[:, :, None]  # (N, T, K) successor is a real token of the row
    h_next = h_c.gather(1, nxt.clamp(max=t - 1).reshape(1, -1).expand(n, -1)).reshape(n, t, window)  # (N, T, K)
    total = torch.where(valid, h_next, torch.zeros_like(h_next)).sum(dim=2)  # (N, T)
    cnt = valid.sum(dim=2)  # (N, T)
    mean_next = torch.where(cnt > 0, total / cnt.clamp(min=1), h_c)  # (N, T) last real token: H_T itself
    h_hat_c = torch.minimum(h_c, mean_next)  # (N, T)
    out = entropy.clone()
    out.scatter_(1, order, h_hat_c)  # back to the original positions
    return torch.where(real, out, entropy)


def egrsd_magnitude(
    teacher_logp: Tensor, student_logp: Tensor, mask: Tensor, form: str = "abs", cap: float = 5.0
) -> Tensor:
    """EGRSD disagreement magnitude on the sampled token (arXiv 2605.13255; forms [inferred]).

    (N, T) teacher log-prob q, (N, T) student log-prob s, (N, T) mask -> (N, T), detached:
    ``"abs"`` (default): ``min(|q - sg s|, M)``; ``"ratio"``: ``clip(exp(q - s), 1/M, M)``, computed as
    ``exp(clip(q - s, -log M, log M))`` so a huge gap cannot overflow. ``M = cap`` (default 5; ``>= 1``
    for "ratio"). Exactly 0 outside the mask (padding garbage cannot leak).
    """
    if form not in MAGNITUDE_FORMS:
        raise ValueError(f"unknown magnitude form {form!r}; valid: {', '.join(MAGNITUDE_FORMS)}")
    if not cap > 0 or (form == "ratio" and cap < 1):
        raise ValueError(f"egrsd_magnitude cap must be > 0 (>= 1 for 'ratio' so 1/M <= M), got {cap}")
    _same_shape(teacher_logp=teacher_logp, student_logp=student_logp, mask=mask)
    real = mask.bool()  # (N, T)
    diff = torch.where(real, teacher_logp.detach() - student_logp.detach(), torch.zeros_like(teacher_logp))  # (N, T)
    if form == "abs":
        mag = diff.abs().clamp(max=cap)  # (N, T)
    else:
        mag = diff.clamp(min=-math.log(cap), max=math.log(cap)).exp()  # (N, T)
    return torch.where(real, mag, torch.zeros_like(mag))


def egrsd_token_weights(
    adv: Tensor,
    teacher_logp: Tensor,
    student_logp: Tensor,
    entropy: Tensor,
    mask: Tensor,
    *,
    direction: str = "advantage",
    magnitude: str = "abs",
    cap: float = 5.0,
    g_min: float = 0.1,
    tau: float = 1.0,
    lookahead: int = 0,
) -> tuple[Tensor, dict[str, float]]:
    """EGRSD / CL-EGRSD detached token weights ``a_{i,t} = d_i * m_t * g_t`` and their metrics.

    (arXiv 2605.13255; the product of three factors is the paper's, every form is [inferred].)
    Args:
        adv: (N,) sequence advantage A_i (GRPO or Dr. GRPO, computed upstream).
        teacher_logp, student_logp, entropy, mask: (N, T) sampled-token log-probs under the teacher
            (privileged context) and student, the teacher's full-vocab entropy, and the response mask.
        direction: ``"advantage"`` (default) uses A_i, ``"sign"`` uses sign(A_i).
        magnitude, cap: see :func:`egrsd_magnitude`. g_min, tau: see :func:`egrsd_gate`.
        lookahead: 0 = plain EGRSD (gate on H_t); K > 0 = CL-EGRSD (gate on :func:`lookahead_entropy`
            with window K; the spec's CL default is 8).

    The weights are 0 outside the mask and replace the sequence advantage in a PPO-clip loss.
    Metrics (over real tokens): ``egrsd/gate_mean``, ``egrsd/magnitude_mean``, ``egrsd/weight_abs_mean``,
    ``egrsd/floor_frac`` (gate within 1% of its range above g_min, i.e. ``exp(-H_hat/tau) < 0.01``),
    ``egrsd/lookahead_frac`` (tokens whose entropy the lookahead lowered), ``egrsd/entropy_mean``
    (finite entropies), ``egrsd/tokens``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"unknown direction {direction!r}; valid: {', '.join(DIRECTIONS)}")
    if lookahead < 0:
        raise ValueError(f"lookahead must be 0 (plain EGRSD) or a window K >= 1, got {lookahead}")
    _same_shape(teacher_logp=teacher_logp, student_logp=student_logp, entropy=entropy, mask=mask)
    if adv.shape != (mask.shape[0],):
        raise ValueError(f"adv must be (N,) = ({mask.shape[0]},), one advantage per response; got {tuple(adv.shape)}")
    real = mask.bool()  # (N, T)
    h = torch.where(real, entropy.detach(), torch.zeros_like(entropy))  # (N, T) padding cannot be NaN here
    h_eff = lookahead_entropy(h, real, lookahead) if lookahead else h  # (N, T)
    gate = egrsd_gate(h_eff, g_min, tau)  # (N, T)
    mag = egrsd_magnitude(teacher_logp, student_logp, real, magnitude, cap)  # (N, T)
    d = adv.detach().to(mag.dtype)  # (N,)
    d = torch.sign(d) if direction == "sign" else d
    weights = torch.where(real, d[:, None] * mag * gate, torch.zeros_like(mag))  # (N, T)
    n = real.sum().clamp(min=1).to(mag.dtype)
    finite = real & torch.isfinite(h)

    def mean(x: Tensor, where: Tensor = real) -> float:
        return float(torch.where(where, x, torch.zeros_like(x)).sum() / where.sum().clamp(min=1))

    metrics = {
        "egrsd/gate_mean": mean(gate),
        "egrsd/magnitude_mean": mean(mag),
        "egrsd/weight_abs_mean": mean(weights.abs()),
        "egrsd/floor_frac": float(((gate - g_min < 0.01 * (1.0 - g_min)) & real).sum() / n),
        "egrsd/lookahead_frac": float(((h_eff < h) & real).sum() / n),
        "egrsd/entropy_mean": mean(h, finite),
        "egrsd/tokens": float(real.sum()),
    }
    return weights.detach(), metrics
