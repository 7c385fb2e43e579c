"""PPO's critic reads V(s_t), the state *before* completion token t, on both of its paths (issue 45 item 2):
``critic.model=policy`` (a separate CriticModel, its own decoder) and ``critic.model=head`` (a value
head on the policy's own hidden states). The expected values are read by hand from a plain forward of
each row without padding: the state before token t of a row whose prompt has p tokens is the decoder's
output at index p - 1 + t. A critic one token late (index p + t) gives other numbers and fails here."""

from types import SimpleNamespace

import pytest
import torch

from reasonrl.models import build_tiny
from reasonrl.models.critic import ValueHead, critic_from_policy
from reasonrl.parts import Critic

# row 0: prompt of 3 tokens left-padded to 4, completion of 2 right-padded to 3; row 1: no padding
PROMPTS = torch.tensor([[0, 5, 6, 7], [8, 9, 10, 11]])
PMASK = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
COMPS = torch.tensor([[12, 13, 0], [14, 15, 16]])
CMASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
RO = SimpleNamespace(prompt_ids=PROMPTS, prompt_mask=PMASK, completion_ids=COMPS, completion_mask=CMASK)


def _by_hand(decoder, head) -> torch.Tensor:
    """(2, 3) V(s_t) from a forward of each unpadded row: hidden index p - 1 + t, 0 on padding."""
    out = torch.zeros(2, 3)
    for r in range(2):
        prompt = PROMPTS[r][PMASK[r].bool()]
        comp = COMPS[r][CMASK[r].bool()]
        h = decoder(input_ids=torch.cat([prompt, comp])[None]).last_hidden_state[0]  # (p + c, H)
        p = len(prompt)
        for t in range(len(comp)):
            out[r, t] = head(h[p - 1 + t])
    return out


@pytest.mark.parametrize("source", ["policy", "head"])
def test_the_critic_values_token_t_from_the_state_before_it(source):
    model, _ = build_tiny("tiny", seed=0)
    model.eval()
    if source == "policy":
        module = critic_from_policy(model, seed=3).eval()
        decoder, head = module.decoder, module.head
    else:
        module = ValueHead(model.config.hidden_size, seed=3)
        decoder, head = model.model, module
    with torch.no_grad():
        want = _by_hand(decoder, head)
        got = Critic(model=source).values(module, model, RO, torch.arange(2))
        # the state after token t (one token late) is a different number: the check can tell them apart
        late = decoder(input_ids=torch.cat([PROMPTS[1], COMPS[1]])[None]).last_hidden_state[0, 4]
        assert abs(float(head(late)) - float(want[1, 0])) > 1e-4
    assert got.shape == (2, 3)
    assert torch.allclose(got, want, atol=1e-5), (got, want)
    assert float(got[0, 2]) == 0.0  # the padding column


def test_the_separate_critic_starts_from_the_policys_decoder_weights():
    # critic.model=policy copies the decoder: before any update its hidden states are the policy's own,
    # so the two paths give the same values with the same head
    model, _ = build_tiny("tiny", seed=0)
    model.eval()
    critic = critic_from_policy(model, seed=3).eval()
    with torch.no_grad():
        separate = Critic(model="policy").values(critic, model, RO, torch.arange(2))
        shared = Critic(model="head").values(critic.head, model, RO, torch.arange(2))
    assert torch.allclose(separate, shared, atol=1e-5)
