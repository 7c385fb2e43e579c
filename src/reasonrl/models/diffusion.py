"""A tiny masked-diffusion language model (LLaDA-style, arXiv 2502.09992) over the shipped characters.

The network is a stock bidirectional transformer (transformers' BERT with an MLM head, dropout off)
under its own ``model_type`` so that ``save_pretrained`` / ``from_pretrained`` work as for any HF
model and :func:`reasonrl.models.load_model` recognises the folder. Its vocabulary is the character
tokenizer's plus a ``<mask>`` token. A completion lives on a fixed **canvas** of ``canvas`` positions
after the prompt: the response, its EOS, then EOS to the end (how LLaDA's SFT pads, so the model
learns where to stop). Every position holds a token or the mask.

What the rest of the library calls on it (duck-typed, so the rollout layer imports nothing from here):

* ``canvas_logits(prompt_ids, prompt_mask, canvas)`` -- (n, L, V) logits at the canvas positions,
  the pad and mask tokens at :data:`NEVER` (probability 0: a finished canvas never holds a mask);
* ``score_completions(...)`` -- what :func:`reasonrl.models.scoring.score_completions` returns for it:
  d1's one-step per-token estimate (arXiv 2504.12216): log p(y_j | x, whole canvas masked);
* ``masked_token_logp(...)`` -- log p of the canvas tokens under given masks (TraFL's ELBO surrogate);
* ``pooled_prompt(...)`` -- the mean prompt hidden state beside a fully masked canvas (a log Z head's input).
* ``config.is_masked_diffusion`` marks the model; ``config.steps``, ``block_length`` and
  ``remasking`` are its sampler's settings (:mod:`reasonrl.rollout.diffusion`).
"""

from __future__ import annotations

import torch
from torch import Tensor
from transformers import AutoConfig, AutoModelForMaskedLM, BertConfig, BertForMaskedLM

from .scoring import chunked_logprobs_and_entropy
from .tokenizer import build_char_tokenizer

MASK = "<mask>"
MODEL_TYPE = "reasonrl_mdlm"

# hidden, layers, heads, intermediate: "small" as the autoregressive base (~3.3M parameters, 6.6 MB in fp16)
NEVER = -1e9  # the logit of pad and mask: probability exactly 0 in float32, yet 0 * logit stays finite (entropies)
SIZES = {"tiny": (128, 2, 4, 384), "small": (256, 4, 4, 768)}


class DiffusionConfig(BertConfig):
    model_type = MODEL_TYPE
    is_masked_diffusion = True

    def __init__(
        self,
        mask_token_id: int = 100,
        canvas: int = 64,
        steps: int = 32,
        block_length: int = 8,
        remasking: str = "low_confidence",
        **kwargs,
    ):
        kwargs.setdefault("hidden_dropout_prob", 0.0)  # deterministic forwards, as the causal base's
        kwargs.setdefault("attention_probs_dropout_prob", 0.0)
        kwargs.setdefault("type_vocab_size", 1)
        super().__init__(**kwargs)
        self.mask_token_id, self.canvas = mask_token_id, canvas
        self.steps, self.block_length, self.remasking = steps, block_length, remasking


class DiffusionLM(BertForMaskedLM):
    """The masked-diffusion policy (see the module docstring for what callers use)."""

    config_class = DiffusionConfig

    def _inputs(self, prompt_ids: Tensor, prompt_mask: Tensor, canvas: Tensor) -> dict[str, Tensor]:
        device = self.device
        ids = torch.cat([prompt_ids, canvas], 1).to(device)  # (n, P + L)
        mask = torch.cat([prompt_mask, torch.ones_like(canvas)], 1).to(device)  # left padding of the prompt off
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)  # real tokens count from 0, as the causal base
        return {"input_ids": ids, "attention_mask": mask, "position_ids": positions}

    def canvas_logits(self, prompt_ids: Tensor, prompt_mask: Tensor, canvas: Tensor) -> Tensor:
        """(n, P) left-padded prompts, (n, L) canvas ids (the mask id where masked) -> (n, L, V) float logits."""
        logits = self(**self._inputs(prompt_ids, prompt_mask, canvas)).logits[:, -canvas.shape[1] :]
        forbidden = torch.zeros(logits.shape[-1], dtype=torch.bool, device=logits.device)
        forbidden[[self.config.mask_token_id, self.config.pad_token_id]] = True
        return logits.float().masked_fill(forbidden, NEVER)

    def masked_canvas(self, rows: int) -> Tensor:
        return torch.full((rows, self.config.canvas), self.config.mask_token_id, dtype=torch.long)

    def fill_canvas(self, completion_ids: Tensor, completion_mask: Tensor) -> Tensor:
        """(n, T) right-padded completions -> (n, L) canvases: each completion, then EOS to the end."""
        L = self.config.canvas
        if completion_ids.shape[1] > L:
            raise ValueError(f"a completion of {completion_ids.shape[1]} tokens does not fit the model's canvas of {L}")
        out = torch.full((len(completion_ids), L), self.config.eos_token_id, dtype=torch.long)
        keep = completion_mask.bool().cpu()
        out[:, : completion_ids.shape[1]] = torch.where(keep, completion_ids.cpu(), out[:, : completion_ids.shape[1]])
        return out

    def score_completions(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        completion_ids: Tensor,
        completion_mask: Tensor,
        *,
        temperature: float = 1.0,
        chunk_rows: int = 64,
        entropies: bool = True,
        extra_labels: Tensor | None = None,
    ):
        """d1's one-step estimate: (n, T) log p(y_t | x, canvas fully masked) and the entropies of those
        distributions, 0 on padding. The canvas is always ``config.canvas`` long, so the values do not
        depend on how wide the caller trimmed the completions (micro-batching changes nothing)."""
        if extra_labels is not None:
            raise ValueError(
                "a masked-diffusion model scores no second label set (extra_labels: TGPO needs a causal LM)"
            )
        T, out_lp, out_ent = completion_ids.shape[1], [], []
        for s in range(0, len(prompt_ids), chunk_rows):
            p_ids, p_mask = prompt_ids[s : s + chunk_rows], prompt_mask[s : s + chunk_rows]
            logits = self.canvas_logits(p_ids, p_mask, self.masked_canvas(len(p_ids)))[:, :T]  # (r, T, V)
            lp, ent = chunked_logprobs_and_entropy(
                logits, completion_ids[s : s + chunk_rows].to(logits.device), temperature
            )
            cm = completion_mask[s : s + chunk_rows].to(lp)
            out_lp.append(lp * cm)
            out_ent.append(ent * cm)
        return torch.cat(out_lp), (torch.cat(out_ent) if entropies else None)

    def masked_token_logp(
        self,
        prompt_ids: Tensor,
        prompt_mask: Tensor,
        completion_ids: Tensor,
        completion_mask: Tensor,
        masked: Tensor,
        temperature: float = 1.0,
    ) -> Tensor:
        """(n, K, L) bool masks over the canvas -> (n, K, L) log p(canvas token | x, canvas with draw k's
        positions masked), one forward per draw (TraFL's surrogate; grad as the caller's mode)."""
        canvas = self.fill_canvas(completion_ids, completion_mask)  # (n, L)
        out = []
        for k in range(masked.shape[1]):
            noisy = torch.where(masked[:, k].cpu(), self.config.mask_token_id, canvas)  # (n, L)
            logp = (self.canvas_logits(prompt_ids, prompt_mask, noisy) / (temperature or 1.0)).log_softmax(-1)
            out.append(logp.gather(-1, canvas.to(logp.device)[..., None]).squeeze(-1))  # (n, L)
        return torch.stack(out, 1)  # (n, K, L)

    def demo_loss(
        self, prompts: list[str], demos: list[str], tok, generator: torch.Generator, t_min: float = 1e-3
    ) -> Tensor:
        """LLaDA's SFT objective on (prompt, demonstration) pairs (arXiv 2502.09992, eq. 5 and its
        guidelines): the canvas holds the demonstration, its EOS and EOS to the end; each row draws
        ``t ~ U(t_min, 1]`` and masks each canvas position with probability t (the prompt stays
        visible); the loss is ``sum_{masked} CE / t`` over the row's canvas positions, divided by the
        canvas length, averaged over rows (an upper bound on the canvas's negative log-likelihood)."""
        enc = tok(list(prompts), return_tensors="pt", padding=True)
        comps = [tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for d in demos]
        L = self.config.canvas
        too_long = [d for d, c in zip(demos, comps) if len(c) > L]
        if too_long:
            raise ValueError(
                f"a demonstration of {len(tok(too_long[0])['input_ids']) + 1} tokens (with EOS) does not fit "
                f"the canvas of {L}: {too_long[0][:40]!r}...; pretrain with a longer canvas"
            )
        canvas = torch.tensor([c + [tok.eos_token_id] * (L - len(c)) for c in comps])  # (n, L)
        u = torch.rand(len(comps), 1, generator=generator, dtype=torch.float64)
        t = ((1.0 - t_min) * (1.0 - u) + t_min).float()  # (n, 1) in (t_min, 1]
        masked = torch.rand(len(comps), L, generator=generator) < t  # (n, L)
        noisy = torch.where(masked, self.config.mask_token_id, canvas)
        logp = self.canvas_logits(enc["input_ids"], enc["attention_mask"], noisy).log_softmax(-1)  # (n, L, V)
        nll = -logp.gather(-1, canvas.to(logp.device)[..., None]).squeeze(-1)  # (n, L)
        per_row = (nll * masked.to(nll)).sum(-1) / t.to(nll).squeeze(-1) / L  # (n,)
        return per_row.mean()

    def pooled_prompt(self, prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
        """(n, P) prompts -> (n, H): the last layer's prompt states beside a fully masked canvas, meaned
        over the real prompt tokens (a function of the prompt alone, as a causal LM's prompt states)."""
        out = self(
            **self._inputs(prompt_ids, prompt_mask, self.masked_canvas(len(prompt_ids))), output_hidden_states=True
        )
        hidden = out.hidden_states[-1][:, : prompt_ids.shape[1]]  # (n, P, H)
        m = prompt_mask.to(hidden.device, hidden.dtype)[..., None]
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1)


AutoConfig.register(MODEL_TYPE, DiffusionConfig)
AutoModelForMaskedLM.register(DiffusionConfig, DiffusionLM)


def is_diffusion(model) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_masked_diffusion", False))


def build_diffusion_tokenizer():
    """The character tokenizer with a ``<mask>`` token (id 100, after the 100 symbols)."""
    tok = build_char_tokenizer()
    tok.add_special_tokens({"mask_token": MASK})
    return tok


def diffusion_config(size: str = "small", canvas: int = 64, max_positions: int = 512) -> DiffusionConfig:
    if size not in SIZES:
        raise ValueError(f"unknown diffusion-model size {size!r}; valid sizes: {sorted(SIZES)}")
    hidden, layers, heads, inter = SIZES[size]
    tok = build_diffusion_tokenizer()
    return DiffusionConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=inter,
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        mask_token_id=tok.mask_token_id,
        canvas=canvas,
        steps=canvas // 2,
        tie_word_embeddings=True,
    )


def set_canvas(model, positions: int) -> None:
    """Set a diffusion model's canvas to ``positions`` rounded up to whole blocks, and its sampler to
    LLaDA's two positions committed per step (``steps = canvas / 2``)."""
    block = model.config.block_length
    model.config.canvas = -(-int(positions) // block) * block
    model.config.steps = max(1, model.config.canvas // 2)


def build_diffusion(size: str = "small", seed: int = 0, canvas: int = 64):
    """A freshly initialised masked-diffusion LM and its tokenizer."""
    torch.manual_seed(seed)
    return DiffusionLM(diffusion_config(size, canvas)), build_diffusion_tokenizer()
