"""Shared test helpers (not fixtures)."""
import torch

from reasonrl.rollout import Rollouts


def text_rollouts(prompts, texts, n, finish_reasons=None) -> Rollouts:
    """Rollouts for scripted completion texts: one token per character, no model involved."""
    R = len(texts)
    lengths = torch.tensor([len(t) for t in texts])
    mask = (torch.arange(int(lengths.max()))[None] < lengths[:, None]).long()
    return Rollouts(prompts=[p for p in prompts for _ in range(n)], texts=list(texts),
                    prompt_ids=torch.ones(R, 1, dtype=torch.long), prompt_mask=torch.ones(R, 1, dtype=torch.long),
                    completion_ids=mask.clone(), completion_mask=mask, logprobs=torch.zeros(mask.shape),
                    finish_reasons=list(finish_reasons or ["eos"] * R), n=n, entropies=torch.zeros(mask.shape))
