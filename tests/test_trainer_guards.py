"""Trainer guards: which rows the update may skip, and micro-batching never changing the maths.

Every case takes one optimiser step over the same 8 rows (2 prompts x 4 samples, seed 5) at lr 0,
so the weights do not move and the gradients of two set-ups can be compared directly.
"""

import dataclasses

import pytest
import torch

from reasonrl.config.train import TrainConfig
from reasonrl.models import load_model
from reasonrl.parts import KL
from reasonrl.recipes import get_recipe
from reasonrl.tasks import get_task
from reasonrl.loop.trainer import Trainer


def _recipe(name="grpo", **changes):
    base = get_recipe(name)
    return dataclasses.replace(base, group_size=4, optim=dataclasses.replace(base.optim, lr=0.0), **changes)


def _step(tiny_dir, recipe, *, micro=8, skip=True, advantages=None, ref_shift=0.0):
    """Gradients and metrics of one optimiser step over all rows. ``advantages(batch)`` replaces the
    batch's; ``ref_shift`` lowers the reference log-probs so that k3 has a gradient (it has none
    where the policy equals the reference, as it does before any update)."""
    model, tok = load_model(tiny_dir)
    cfg = TrainConfig(
        model=str(tiny_dir), prompts_per_step=2, micro_batch_size=micro, seed=5, skip_zero_advantage_rows=skip
    )
    tr = Trainer(model, tok, get_task("arithmetic"), recipe, cfg, run_dir="/nonexistent")
    batch = tr.batches.make(cfg.prompts_per_step)
    if advantages is not None:
        batch.advantages = advantages(batch)
    if ref_shift:
        batch.ref_logp = batch.ref_logp - ref_shift * batch.ro.completion_mask  # (R, T)
    out = tr._optimizer_step(batch, torch.arange(len(batch.ro.texts)))
    return [p.grad.clone() for p in model.parameters()], out


def _zero(batch):
    return torch.zeros(len(batch.ro.texts))  # (R,)


def _linspace(batch):
    return torch.linspace(-1.0, 1.0, len(batch.ro.texts))  # (R,) every row carries gradient


def _per_token(batch):
    # (R, T) advantages as SAPO's StepCredit gives: a different value per token, 0 on tokens outside
    # every step (here every third position)
    R, T = batch.ro.completion_ids.shape
    adv = torch.sin(0.9 * torch.arange(R)[:, None] + 0.37 * torch.arange(T)[None, :])  # (R, T)
    adv[:, ::3] = 0.0
    return adv


def aux_logp(ctx):
    """An auxiliary term with a gradient of its own: -0.1 x the token mean of the log-likelihood."""
    term = -0.1 * (ctx.logp * ctx.mask).sum() / ctx.n_tokens
    return term, {"loss/aux_term": float(term.detach())}


def _nonzero(grads):
    return any(float(g.abs().max()) > 1e-6 for g in grads)


def _same(a, b):
    return all(torch.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(a, b))


# a term besides the policy loss: (recipe changes, reference shift)
OTHER_TERMS = {
    "kl": (dict(kl=KL(coef=0.1)), 0.3),
    "entropy": (dict(entropy_coef=0.01), 0.0),
    "aux": (dict(aux_losses=(aux_logp,)), 0.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("term", sorted(OTHER_TERMS))
def test_zero_advantage_rows_are_kept_when_another_term_has_a_gradient(tiny_dir, term):
    # with every A = 0 the policy loss has no gradient, but a KL, entropy or auxiliary term does: skipping
    # the rows (Trainer._rows_with_gradient) would silently drop it
    changes, shift = OTHER_TERMS[term]
    recipe = _recipe(**changes)
    (kept, out), (full, _) = (_step(tiny_dir, recipe, skip=s, advantages=_zero, ref_shift=shift) for s in (True, False))
    assert _nonzero(kept) and _same(kept, full)
    assert out["update/rows_skipped_frac"] == 0.0


def test_zero_advantage_rows_are_skipped_with_the_policy_loss_alone(tiny_dir):
    # the other side of the guard: with only the policy loss a row with A = 0 contributes exactly 0,
    # so all 8 rows are skipped and the gradient is the same zero as without skipping
    (skipped, out), (full, _) = (_step(tiny_dir, _recipe(), skip=s, advantages=_zero) for s in (True, False))
    assert out["update/rows_skipped_frac"] == 1.0
    assert not _nonzero(skipped) and _same(skipped, full)


# name -> (recipe, advantages, reference shift)
MICRO_CASES = {
    "gspo_sequence_ratio": (lambda: _recipe("gspo"), _linspace, 0.0),
    "kl_k3": (lambda: _recipe(kl=KL(coef=0.5, estimator="k3")), _zero, 0.3),
    # threshold 0.3 nats: the tiny model's entropies (mean ~0.8) exceed it on many tokens, so q != 1
    "sage_branch": (lambda: _recipe(kl=KL(coef=0.5, guide="branch", threshold=0.3)), _zero, 0.0),
    "per_token_advantages": (lambda: _recipe(), _per_token, 0.0),
}


@pytest.mark.parametrize(
    "case", [c if c == "gspo_sequence_ratio" else pytest.param(c, marks=pytest.mark.slow) for c in sorted(MICRO_CASES)]
)  # one case in the default tier
def test_eight_micro_batches_of_one_equal_one_of_eight(tiny_dir, case):
    # every term is normalised by the minibatch's global token / sequence counts and micro-batches only
    # trim padding, so accumulating 8 micro-batches of 1 row gives the gradient of 1 micro-batch of 8
    make, advantages, shift = MICRO_CASES[case]
    (one, out1), (eight, out8) = (
        _step(tiny_dir, make(), micro=m, advantages=advantages, ref_shift=shift) for m in (8, 1)
    )
    assert _nonzero(one) and _same(one, eight)
    assert out1["update/rows_skipped_frac"] == out8["update/rows_skipped_frac"] == 0.0
    if case == "sage_branch":  # the guide acted: some q = 1 + 0.3 (H - 0.3) > 1, the same share either way
        assert out1["sage/frac_shaped"] > 0 and out1["sage/q_max"] > 1.0
        assert out1["sage/frac_shaped"] == pytest.approx(out8["sage/frac_shaped"], rel=1e-6)
    if case == "gspo_sequence_ratio":  # on-policy: the sequence ratio is 1 (inside GSPO's 3e-4 band)
        assert out1["loss/ratio_mean"] == pytest.approx(1.0, abs=1e-5)
