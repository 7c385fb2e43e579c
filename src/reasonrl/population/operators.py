"""Same-rank LoRA operators for population-based training (PopuLoRA; spec envs-selfplay-eval.md 4 (b)).

A LoRA module holds delta W = s B A with B (d, r), A (r, k) and s = alpha / r (the same for every
member of a population, so the operators work on B A and leave s alone). An adapter is a
``LoRAFactors`` dict: module name -> (A (r, k), B (d, r)), numpy float64 (peft's ``lora_A`` is r x k
and ``lora_B`` d x r; :func:`reasonrl.models.lora.adapter_factors` is the bridge). Every operator
returns factors of the parents' rank r, so an offspring drops into the same peft adapter slot. The
paper only says "mutations and crossovers that produce same-rank members in seconds"; the formulas
are the spec's [inferred], each O((d + k) r^2) per module.

Randomness comes from an explicit ``numpy.random.Generator``; modules are visited in sorted order, so
the same generator state gives the same offspring whatever order the dict was built in.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

__all__ = [
    "LoRAFactors",
    "crossover_modulewise",
    "crossover_svd",
    "delta",
    "mutate_gaussian",
    "mutate_spectral",
    "refactor",
    "check_factors",
]

LoRAFactors = Mapping[str, tuple[np.ndarray, np.ndarray]]  # module -> (A (r, k), B (d, r))


def check_factors(f: LoRAFactors, other: LoRAFactors | None = None) -> None:
    """Every module an (A (r, k), B (d, r)) pair of one rank r; with ``other``, the same modules and shapes."""
    for m, (a, b) in f.items():
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise ValueError(f"module {m}: A {a.shape} and B {b.shape} are not (r, k) and (d, r) of one rank")
    if other is not None:
        if set(f) != set(other):
            raise ValueError(f"the parents adapt different modules: {sorted(set(f) ^ set(other))[:3]}")
        for m in f:
            if f[m][0].shape != other[m][0].shape or f[m][1].shape != other[m][1].shape:
                raise ValueError(f"module {m}: the parents' shapes differ ({f[m][0].shape}, {other[m][0].shape})")


def delta(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(r, k), (d, r) -> (d, k): B A, the module's weight change without the scale s."""
    return b @ a


def refactor(
    b_cat: np.ndarray, a_cat: np.ndarray, r: int, scale: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The best rank-``r`` factors of B_cat A_cat without forming the (d, k) product (spec 4 (b), operator 4):
    B_cat (d, q), A_cat (q, k) -> QR B_cat = Q_B R_B, A_cat^T = Q_A R_A, SVD(R_B R_A^T) = U S V^T on the
    (q, q) core, then B' = Q_B U_r sqrt(S_r) (d, r), A' = sqrt(S_r) V_r^T Q_A^T (r, k). ``scale`` (q,)
    multiplies the singular values first (spectral mutation). Returns (A', B'). By Eckart-Young B' A'
    is the best rank-r approximation of B_cat A_cat in Frobenius norm."""
    q_b, r_b = np.linalg.qr(b_cat)  # (d, q), (q, q)
    q_a, r_a = np.linalg.qr(a_cat.T)  # (k, q), (q, q)
    u, s, vt = np.linalg.svd(r_b @ r_a.T)  # (q, q), (q,), (q, q); s descending
    if scale is not None:
        s = s * scale
        order = np.argsort(-s, kind="stable")  # a scaled spectrum may reorder: keep the r largest
        u, s, vt = u[:, order], s[order], vt[order]
    root = np.sqrt(s[:r])  # (r,)
    b_new = q_b @ u[:, :r] * root  # (d, r)
    a_new = root[:, None] * (vt[:r] @ q_a.T)  # (r, k)
    return a_new, b_new


def mutate_gaussian(f: LoRAFactors, sigma: float, rng: np.random.Generator, abs_sigma: float = 1e-3) -> dict:
    """Operator 1: A <- A + sigma std(A) N(0, 1), B <- B + sigma std(B) N(0, 1), per module. A factor whose
    std is 0 (a fresh B) gets ``sigma * abs_sigma`` instead, so it can move at all."""
    check_factors(f)
    out = {}
    for m in sorted(f):
        a, b = f[m]
        scale_a = np.std(a) if np.std(a) > 0 else abs_sigma
        scale_b = np.std(b) if np.std(b) > 0 else abs_sigma
        out[m] = (
            a + sigma * scale_a * rng.standard_normal(a.shape),
            b + sigma * scale_b * rng.standard_normal(b.shape),
        )
    return out


def mutate_spectral(f: LoRAFactors, sigma: float, rng: np.random.Generator) -> dict:
    """Operator 2: the thin SVD of B A (through QR), each singular value times exp(sigma N(0, 1)), refactored
    to rank r. sigma = 0 is the identity on B A (the factors themselves are re-balanced)."""
    check_factors(f)
    out = {}
    for m in sorted(f):
        a, b = f[m]
        r = a.shape[0]
        out[m] = refactor(b, a, r, scale=np.exp(sigma * rng.standard_normal(r)))
    return out


def crossover_modulewise(f1: LoRAFactors, f2: LoRAFactors, rng: np.random.Generator) -> tuple[dict, dict[str, int]]:
    """Operator 3: each module's (A, B) *pair* from parent 1 or 2 with probability 1/2, never split (a B
    with another parent's A multiplies unrelated bases). Returns the offspring and module -> parent (1|2)."""
    check_factors(f1, f2)
    out, origin = {}, {}
    for m in sorted(f1):
        origin[m] = 1 if rng.random() < 0.5 else 2
        a, b = (f1 if origin[m] == 1 else f2)[m]
        out[m] = (a.copy(), b.copy())
    return out, origin


def crossover_svd(f1: LoRAFactors, f2: LoRAFactors, a: float) -> dict:
    """Operator 4: per module the best rank-r approximation of a B1 A1 + (1 - a) B2 A2 (rank <= 2r):
    B_cat = [sqrt(a) B1, sqrt(1-a) B2] (d, 2r), A_cat = [sqrt(a) A1; sqrt(1-a) A2] (2r, k), so that
    B_cat A_cat is the target exactly, then :func:`refactor` to rank r. Averaging A and B separately
    would add the cross terms B1 A2 and B2 A1."""
    if not 0.0 <= a <= 1.0:
        raise ValueError(f"crossover_svd: the weight a must be in [0, 1], got {a}")
    check_factors(f1, f2)
    out = {}
    for m in sorted(f1):
        (a1, b1), (a2, b2) = f1[m], f2[m]
        b_cat = np.concatenate([np.sqrt(a) * b1, np.sqrt(1 - a) * b2], axis=1)  # (d, 2r)
        a_cat = np.concatenate([np.sqrt(a) * a1, np.sqrt(1 - a) * a2], axis=0)  # (2r, k)
        out[m] = refactor(b_cat, a_cat, a1.shape[0])
    return out
