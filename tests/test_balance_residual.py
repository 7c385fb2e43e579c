"""The trajectory-balance residual assembled by hand through the part (parts/balance.py) for each recipe's
settings (issue 45 item 2): ``delta_i = log Z(x_i) + lbar(y_i) - lbar_ref(y_i) - beta r_hat_i``, L = sum_i w_i
delta_i^2 / n_seqs. Each number below is worked out from the scripted inputs, so dropping the reference term,
scoring FlowRL's raw reward instead of its group advantage, feeding the log Z head anything but the row's
own prompt, or ignoring ``length_norm=false`` changes the loss and fails a test.

Two prompts, one completion each (G = 1), T = 3:
    policy log-probs  row 0: -1, -2, -3 (3 tokens)        row 1: -0.5, -1.5, [pad]  (2 tokens)
    reference         row 0: -2, -2, -3                    row 1: -1, -2, [9 on the padding, never read]
    behaviour (old)   row 0: -1.5, -2, -3 (sum gap +0.5)   row 1: -0.4, -1.5 (sum gap -0.1)
    raw rewards 1, 0; the recipe's advantages 0.5, -0.5
Token means: lbar = -2, -1; lbar_ref = -7/3, -1.5. Sums: -6, -2; ref -7, -3.
"""

import dataclasses
import math
from contextlib import nullcontext
from types import SimpleNamespace

import pytest
import torch
from helpers import batch_context, loss_context

from reasonrl.data.partition import ZRow, ZTable
from reasonrl.data.selector import prompt_hash
from reasonrl.models import build_tiny
from reasonrl.parts.protocol import Channel
from reasonrl.recipes import get_recipe
from reasonrl.tasks import Item

LOGP = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.5, 0.0]])
REF = torch.tensor([[-2.0, -2.0, -3.0], [-1.0, -2.0, 9.0]])
OLD = torch.tensor([[-1.5, -2.0, -3.0], [-0.4, -1.5, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
PROMPTS = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])  # row 0 left-padded (3 real tokens)
PMASK = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
ITEMS = [Item(key="a", prompt="1+1=?\n", answer="2"), Item(key="b", prompt="2+2=?\n", answer="4")]
W_CLIP = (1.2, math.exp(-0.1))  # exp(+0.5) = 1.65 clipped to 1 + 0.2; exp(-0.1) = 0.904837 inside [0.8, 1.2]


def _batch():
    ro = SimpleNamespace(
        prompt_ids=PROMPTS,
        prompt_mask=PMASK,
        completion_ids=MASK.long(),
        completion_mask=MASK.long(),
        logprobs=OLD,
        train_mask=None,
        texts=["x", "y"],
    )
    return SimpleNamespace(
        ro=ro, rewards=torch.tensor([[1.0], [0.0]]), advantages=torch.tensor([0.5, -0.5]), items=ITEMS
    )


class SpyHead(torch.nn.Module):
    """log Z = pooled @ v (a fixed vector), recording its input."""

    def __init__(self, hidden):
        super().__init__()
        self.v = torch.linspace(-1.0, 1.0, hidden)
        self.seen = []

    def forward(self, pooled):
        self.seen.append(pooled.detach().clone())
        return pooled @ self.v


def _loss(part, data, model=None, head=None, logp=LOGP, grad=None):
    leaf = logp.clone().requires_grad_(True)
    ctx = loss_context(
        logp=leaf, mask=MASK, batch=_batch(), rows=torch.arange(2), model=model, n_seqs=2, data=data, state={}
    )
    ctx = dataclasses.replace(ctx, modules={} if head is None else {"log_z": head})
    loss, _ = part.loss_term(ctx)
    if grad is not None:
        loss.backward()
        grad.append(leaf.grad)
    return float(loss.detach())


def test_flowrl_residual_by_hand():
    part = get_recipe("flowrl").balance
    assert (part.beta, part.reward, part.weight, part.log_z, part.length_norm) == (15.0, "group", "clip", "head", True)
    model, _ = build_tiny("tiny", seed=0)
    model.eval()
    head = SpyHead(model.config.hidden_size)
    with torch.no_grad():  # the head's input: each prompt alone, the mean of its real tokens' last hidden states
        pooled = torch.stack(
            [model.model(input_ids=PROMPTS[r][PMASK[r].bool()][None]).last_hidden_state[0].mean(0) for r in range(2)]
        )
        z = pooled @ head.v
    loss = _loss(part, Channel(rows={"ref_logp": REF}), model=model, head=head)
    assert torch.allclose(head.seen[0], pooled, atol=1e-5)
    # delta_0 = z_0 + (-2) - (-7/3) - 15 * 0.5 = z_0 - 7.1667; delta_1 = z_1 + (-1) - (-1.5) - 15 * (-0.5) = z_1 + 8
    d0, d1 = float(z[0]) - 2 + 7 / 3 - 7.5, float(z[1]) - 1 + 1.5 + 7.5
    assert loss == pytest.approx((W_CLIP[0] * d0**2 + W_CLIP[1] * d1**2) / 2, rel=1e-5)


def _disa_data(part):
    table = ZTable.of(
        {},
        [
            ZRow("a", prompt_hash(ITEMS[0].prompt), 0.4, 8, 8, 0.5, 8),
            ZRow("b", prompt_hash(ITEMS[1].prompt), -0.1, 8, 8, 0.5, 8),
        ],
    )
    ref = SimpleNamespace(score_completions=lambda *a, **k: (REF, None))  # the reference's token log-probs
    b = _batch()
    ctx = batch_context(
        items=ITEMS,
        rollouts=b.ro,
        rewards=b.rewards,
        reference=lambda: nullcontext(ref),
        micro=8,
        state={"table": table.state(), "table_summary": {"ess_mean": 8, "ess_min": 8, "ess_tilted_mean": 8}},
    )
    part.score_batch(ctx)  # reads the reference's log-probs and each prompt's log Z_hat (0.4, -0.1)
    return ctx.data


@pytest.mark.parametrize("length_norm", [True, False])
def test_disa_residual_by_hand(length_norm):
    part = dataclasses.replace(get_recipe("disa").balance, length_norm=length_norm)
    assert (part.beta, part.reward, part.weight, part.log_z) == (1.0, "raw", "clip", "table")
    grad = []
    loss = _loss(part, _disa_data(part), grad=grad)
    if length_norm:  # delta_0 = 0.4 - 2 + 7/3 - 1 * 1 = -0.266667; delta_1 = -0.1 - 1 + 1.5 - 0 = 0.4
        d0, d1 = 0.4 - 2 + 7 / 3 - 1, 0.4
    else:  # sequence sums: delta_0 = 0.4 - 6 + 7 - 1 = 0.4; delta_1 = -0.1 - 2 + 3 - 0 = 0.9
        d0, d1 = 0.4, 0.9
    assert loss == pytest.approx((W_CLIP[0] * d0**2 + W_CLIP[1] * d1**2) / 2, rel=1e-5)
    # the gradient reaches the policy's tokens only (log Z_hat is the table's constant): w_i 2 delta_i / n_seqs,
    # divided by the row's length with length_norm. LN: row 0 1.2 * 2 * -0.266667 / 2 / 3 = -0.106667, row 1
    # 0.904837 * 2 * 0.4 / 2 / 2 = 0.180967; sums: 1.2 * 2 * 0.4 / 2 = 0.48, 0.904837 * 2 * 0.9 / 2 = 0.814354
    g0, g1 = (-0.106667, 0.180967) if length_norm else (0.48, 0.814354)
    assert torch.allclose(grad[0], torch.tensor([[g0, g0, g0], [g1, g1, 0.0]]), atol=1e-5)


class SpyDiffusion:
    """A masked-diffusion LM scoring every canvas position ``value``; its pooled prompt is the prompt's
    real token ids as floats, padded to 4 (so the head sees which prompt it was given)."""

    config = SimpleNamespace(canvas=3, is_masked_diffusion=True)

    def __init__(self, value):
        self.value = value

    def masked_token_logp(self, p_ids, p_mask, c_ids, c_mask, masks, temperature):
        return torch.full(masks.shape, self.value, requires_grad=True)

    def pooled_prompt(self, p_ids, p_mask):
        return (p_ids * p_mask).float()

    def parameters(self):
        return iter([torch.zeros(1)])


@pytest.mark.parametrize("length_norm", [True, False])
def test_trafl_residual_by_hand(length_norm):
    # mask_t = 1: every position masked, so the ELBO surrogate is the token mean of the scored positions
    # (policy -0.5 everywhere, reference -1); with length_norm=false it is that times the response length (3, 2)
    part = dataclasses.replace(get_recipe("trafl").balance, mask_t=1.0, length_norm=length_norm)
    assert (part.beta, part.reward, part.weight, part.log_z, part.surrogate) == (15.0, "group", "one", "head", "elbo")
    policy, ref = SpyDiffusion(-0.5), SpyDiffusion(-1.0)
    b = _batch()
    ctx = batch_context(
        items=ITEMS,
        rollouts=b.ro,
        rewards=b.rewards,
        reference=lambda: nullcontext(ref),
        micro=8,
        policy=policy,
        seed=0,
        step=0,
    )
    part.score_batch(ctx)
    head = SpyHead(4)  # v = (-1, -1/3, 1/3, 1)
    loss = _loss(part, ctx.data, model=policy, head=head)
    # the head's input: row 0's prompt (5, 6, 7) and a padding 0 first; row 1's (8, 9, 10, 11)
    assert torch.equal(head.seen[0], torch.tensor([[0.0, 5, 6, 7], [8, 9, 10, 11]]))
    z0, z1 = -5 / 3 + 6 / 3 + 7, -8 - 9 / 3 + 10 / 3 + 11  # 7.333333, 3.333333
    n = (3, 2) if not length_norm else (1, 1)
    # delta = z + (-0.5 n) - (-1 n) - 15 * adv: row 0 z0 + 0.5 n0 - 7.5, row 1 z1 + 0.5 n1 + 7.5; w = 1
    d0, d1 = z0 + 0.5 * n[0] - 7.5, z1 + 0.5 * n[1] + 7.5
    assert loss == pytest.approx((d0**2 + d1**2) / 2, rel=1e-5)
