"""Unlearnability in RLVR (arXiv 2605.16787; spec distill-and-data.md section 12): the pure parts.

Which prompts training never learned, from several runs' per-problem pass@1 (:func:`classify`),
and how their GRPO gradients at the initial model relate to the others' (:func:`cosine_matrix`,
:func:`mean_similarity`, :func:`block_means`). No model here: the gradients come from
:mod:`reasonrl.diagnostics.gradients`, the runs' files from :mod:`reasonrl.diagnostics.runs`.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch

TAU = 0.1  # pass@1 threshold of the classification (spec 12 (b); the source's --threshold default)
CLASSES = ("easy", "learnable", "unlearnable")  # the heatmap's blocks, in this order
PRECEDENCE = ("unlearnable", "learnable", "easy")  # one block per prompt: the source's plot lets the later group win


def classify(
    initial: Mapping[str, float],
    finals: Sequence[Mapping[str, float]],
    max_rewards: Sequence[Mapping[str, float]],
    tau: float = TAU,
) -> dict[str, list[str]]:
    """The four prompt sets of spec 12 (b), as the source's ``finalize_unlearnable_example_id`` builds them.

    ``initial``: key -> pass@1 of the untrained model; ``finals``: per run, key -> pass@1 after
    training (every run has every key of ``initial``); ``max_rewards``: per run, key -> max over
    steps of the prompt's mean training reward (only the keys the run trained on).
    - no_reward: max reward 0 in any run (verifier failures), the union over runs;
    - unlearnable: pass@1 <= tau after training in every run, minus no_reward;
    - learnable: initial pass@1 <= tau and > tau after training in every run;
    - easy: initial pass@1 > tau.
    The sets may overlap (an easy prompt every run forgot is unlearnable too): :func:`block_of`.
    """
    keys = sorted(initial)
    no_reward = sorted({k for run in max_rewards for k, r in run.items() if r == 0.0})
    flagged_every = [k for k in keys if all(f[k] <= tau for f in finals)]
    return {
        "no_reward": no_reward,
        "unlearnable": [k for k in flagged_every if k not in set(no_reward)],
        "learnable": [k for k in keys if initial[k] <= tau and all(f[k] > tau for f in finals)],
        "easy": [k for k in keys if initial[k] > tau],
    }


def block_of(classes: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """Key -> the one heatmap block it is drawn in: unlearnable before learnable before easy."""
    out: dict[str, str] = {}
    for name in PRECEDENCE:
        for k in classes[name]:
            out.setdefault(k, name)
    return out


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:  # (G,) -> (G,)
    """A = (r - mean) / (std_pop + eps): spec 12 (b), population std (the source's GRPO)."""
    return (rewards - rewards.mean()) / (rewards.std(correction=0) + eps)


def scaled(g: torch.Tensor) -> torch.Tensor:  # (D,) -> (D,) float32
    """``g`` / max|g| when max|g| > 1 (the source's get_scaled_gradient, before the cosine; the
    cosine does not change), in float32: float16 gradients would overflow in the dot product."""
    g = g.float()
    top = g.abs().max()
    return g / top if top > 1 else g


def cosine_matrix(grads: Sequence[torch.Tensor]) -> torch.Tensor:  # N x (D,) -> (N, N) float32
    """Pairwise cosine similarity of flattened prompt gradients, in float32 after :func:`scaled`;
    the diagonal is 1 (as the source's heatmap fills it). A zero gradient has cosine 0 with all."""
    g = torch.stack([scaled(x) for x in grads])  # (N, D)
    unit = g / g.norm(dim=1, keepdim=True).clamp(min=1e-30)  # (N, D)
    sim = unit @ unit.T  # (N, N)
    sim.fill_diagonal_(1.0)
    return sim


def mean_similarity(sim: torch.Tensor) -> torch.Tensor:  # (N, N) -> (N,)
    """Each prompt's mean cosine to the *other* prompts (diagonal left out): an outlier is near 0."""
    n = sim.shape[0]
    if n < 2:
        return torch.zeros(n)
    return (sim.sum(1) - sim.diagonal()) / (n - 1)


def block_means(sim: torch.Tensor, blocks: Sequence[str], order: Sequence[str] = CLASSES) -> dict[str, float | None]:
    """Mean cosine of each pair of blocks ``"a|b"`` (a before b in ``order``); within one block the
    diagonal (self-similarity 1) is left out. None where a block has too few prompts."""
    out: dict[str, float | None] = {}
    idx = {c: torch.tensor([i for i, b in enumerate(blocks) if b == c], dtype=torch.long) for c in order}
    for i, a in enumerate(order):
        for b in order[i:]:
            sub = sim[idx[a]][:, idx[b]]  # (n_a, n_b)
            if a == b:
                n = len(idx[a])
                out[f"{a}|{b}"] = float((sub.sum() - sub.diagonal().sum()) / (n * (n - 1))) if n > 1 else None
            else:
                out[f"{a}|{b}"] = float(sub.mean()) if sub.numel() else None
    return out
