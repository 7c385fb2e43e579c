"""Batched multi-turn episodes against environments, on token ids end to end (:mod:`.episode`).

Each round samples one turn for every live episode in one call of a :class:`TurnSampler` (the engine
continues from each episode's ids), decodes each turn's ids to text for its environment only, steps
every environment at once (threads: a CodeAct step waits on its sandbox), and appends each observation
as ids: the turn markers (the chat template's, or the plain template's) and the observation are
tokenised once, never the policy's text, and special-token text inside an observation stays text
(:func:`encode_text`). Limits (:class:`EpisodeLimits`): a turn cap, an observation cap in tokens
(middle-truncated, with a marker) and a context cap: an episode whose next turn or observation would not
fit ends with ``finish_reason="context"``. The engine decodes at most its ``max_rows`` rows at once.

An environment implements ``reset(item) -> str`` (the episode's first user message: the question, any
tool documentation) and ``step(action_text) -> (observation, done, answer)``; ``close()`` is optional.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol, Sequence

import torch

from ..errors import UserError
from ..models.chat import PLAIN, PromptFormatter, turn_end_id
from ..seeds import stable_seed
from .base import SamplingParams
from .episode import Episode, Segment, middle_truncate
from .hf import row_uniforms


@dataclass(frozen=True)
class EpisodeLimits:
    """Turn cap; each turn's token budget (None: the sampling budget); observation cap (tokens, marker
    included); context cap (prompt + episode tokens); the marker put where an observation was cut."""

    max_turns: int = 4
    max_turn_tokens: int | None = None
    max_obs_tokens: int = 256
    max_context_tokens: int = 2048
    marker: str = "\n...\n"

    def __post_init__(self):
        if self.max_turns < 1 or self.max_obs_tokens < 1 or self.max_context_tokens < 2:
            raise UserError(f"episode limits: max_turns, max_obs_tokens >= 1 and max_context_tokens >= 2, got {self}")


class Turn(NamedTuple):
    ids: list[int]  # the sampled ids (a stop id included, as in any completion)
    logprobs: list[float]  # the behaviour log-prob of each
    reason: str  # "eos" | "stop" | "length"


class TurnSampler(Protocol):
    """Samples one turn per context (token ids), row ``i``'s randomness keyed by ``seeds[i]`` alone."""

    def sample(self, contexts: Sequence[list[int]], sampling: SamplingParams, seeds: Sequence[int]) -> list[Turn]: ...


class EngineTurns:
    """:class:`TurnSampler` over an :class:`~reasonrl.rollout.hf.HFEngine`: it decodes from the contexts' ids
    (left-padded), as branching does, so no text is re-encoded between turns."""

    def __init__(self, engine: Any):
        if not hasattr(engine, "_decode"):
            raise UserError(
                f"multi-turn episodes need an engine that continues from token ids (HFEngine); "
                f"{type(engine).__name__} samples from text only"
            )
        self.engine = engine

    def sample(self, contexts: Sequence[list[int]], sampling: SamplingParams, seeds: Sequence[int]) -> list[Turn]:
        """One turn per context, at most the engine's ``max_rows`` rows decoded at once (each row's
        randomness is its seed's, so the chunks give the rows they would give together). An engine that
        seeds rows itself (vLLM: ``sample_ids``, issue 43) gets the contexts' ids and seeds as they are."""
        if hasattr(self.engine, "sample_ids"):
            st = self.engine.sample_ids([list(c) for c in contexts], 1, sampling, list(seeds))
            return [
                Turn(st.ids[i, : int(st.length[i])].tolist(), st.logp[i, : int(st.length[i])].tolist(), st.reason[i])
                for i in range(len(contexts))
            ]
        step = max(1, int(getattr(self.engine, "max_rows", len(contexts)) or len(contexts)))
        return [
            turn
            for s in range(0, len(contexts), step)
            for turn in self._chunk(contexts[s : s + step], sampling, seeds[s : s + step])
        ]

    @torch.inference_mode()
    def _chunk(self, contexts: Sequence[list[int]], sampling: SamplingParams, seeds: Sequence[int]) -> list[Turn]:
        eng, width = self.engine, max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), eng.tok.pad_token_id, dtype=torch.long)  # (N, L) left-padded
        mask = torch.zeros_like(ids)
        for i, c in enumerate(contexts):
            ids[i, width - len(c) :], mask[i, width - len(c) :] = torch.tensor(c, dtype=torch.long), 1
        u = row_uniforms(list(seeds), 1, sampling.max_new_tokens).to(eng.device)  # (N, T)
        was_training = eng.model.training
        eng.model.eval()
        try:
            st = eng._decode(ids.to(eng.device), mask.to(eng.device), 1, sampling, None, u)
        finally:
            eng.model.train(was_training)
        return [
            Turn(st.ids[i, : int(st.length[i])].tolist(), st.logp[i, : int(st.length[i])].tolist(), st.reason[i])
            for i in range(len(contexts))
        ]


@dataclass(frozen=True)
class ObservationFormat:
    """How an observation becomes ids: ``head`` + the (truncated) observation + ``tail``, each tokenised
    once; ``close``: the id that ends an assistant turn (chat), appended when a turn stopped without it."""

    encode: Callable[[str], list[int]]
    head: list[int]
    tail: list[int]
    marker: list[int]
    close: int | None = None

    @staticmethod
    def build(
        tok: Any,
        formatter: PromptFormatter = PLAIN,
        *,
        role: str = "user",
        template: str = "\nObservation:\n{observation}\n",
        marker: str = "\n...\n",
    ) -> "ObservationFormat":
        markup = lambda s: list(tok(s, add_special_tokens=False)["input_ids"]) if s else []  # noqa: E731
        if formatter.chat:
            head, tail, close = chat_markers(formatter, role)
        else:
            if template.count("{observation}") != 1:
                raise UserError(f"observation template {template!r} must hold {{observation}} exactly once")
            (head, tail), close = template.split("{observation}"), None
        return ObservationFormat(
            lambda s: encode_text(tok, s), markup(head), markup(tail), encode_text(tok, marker), close
        )

    def ids(self, observation: str, cap: int, last_turn: list[int]) -> list[int]:
        """The ids appended after a policy turn ending in ``last_turn``: at most ``cap`` of the observation."""
        body = middle_truncate(self.encode(observation), cap, self.marker)
        close = [self.close] if self.close is not None and (not last_turn or last_turn[-1] != self.close) else []
        return close + self.head + body + self.tail


def encode_text(tok: Any, text: str) -> list[int]:
    """``text`` as ids with special tokens read as plain text: an observation holding ``<|im_end|>`` or
    ``<|im_start|>user`` (a tool's output, a file the agent printed) stays text instead of closing the turn
    or opening a forged one (issue 41). The turn markers around it are the template's and parse normally."""
    return list(tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"])


def chat_markers(formatter: PromptFormatter, role: str) -> tuple[str, str, int]:
    """The chat template's text between an assistant turn's end token and a ``role`` message's content
    (head), and from that content to the next assistant turn's content (tail); the end token's id."""
    tok, a, o = formatter.tok, "\u2063A\u2063", "\u2063O\u2063"
    turns = [{"role": "user", "content": "q"}, {"role": "assistant", "content": a}, {"role": role, "content": o}]
    text, end = formatter._template(turns), turn_end_id(tok)
    if end is None or a not in text or o not in text:
        raise UserError(
            f"the chat template cannot show a {role!r} turn after an assistant turn; "
            "use another observation role or prompt.format=plain"
        )
    after, end_text = text[text.index(a) + len(a) :], tok.convert_ids_to_tokens(end)
    if not after.startswith(end_text):
        raise UserError(f"the chat template does not close an assistant turn with {end_text!r} right after its text")
    head, tail = after[len(end_text) :].split(o, 1)
    return head, tail, end


def step_all(envs: Sequence[Any], actions: Sequence[str], workers: int) -> list[tuple[str, bool, str | None]]:
    """``env.step(action)`` for every pair at once (threads), checked: a malformed reply is a UserError."""

    def one(pair):
        env, action = pair
        out = env.step(action)
        if not (isinstance(out, tuple) and len(out) == 3 and isinstance(out[0], str)):
            raise UserError(
                f"{type(env).__name__}.step must return (observation: str, done: bool, answer), got {out!r}"
            )
        obs, done, answer = out
        return obs, bool(done), None if answer is None else str(answer)

    if not envs:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(envs))), thread_name_prefix="reasonrl-env") as pool:
        return list(pool.map(one, zip(envs, actions)))


def run_episodes(
    sampler: TurnSampler,
    envs: Sequence[Any],
    prompt_ids: Sequence[list[int]],
    sampling: SamplingParams,
    seeds: Sequence[int],
    limits: EpisodeLimits,
    fmt: ObservationFormat,
    decode: Callable[[list[int]], str],
    workers: int = 8,
) -> list[Episode]:
    """Run one episode per environment (already reset; ``prompt_ids``: each one's prompt) to its end."""
    eps = [Episode(list(p)) for p in prompt_ids]
    turn_cap = limits.max_turn_tokens or sampling.max_new_tokens
    for t in range(limits.max_turns):
        live = [i for i, e in enumerate(eps) if not e.done]
        for i in live:  # no room for even one token: the episode cannot take another turn
            if len(eps[i].context_ids) >= limits.max_context_tokens:
                eps[i].finish_reason = "context"
        live = [i for i in live if not eps[i].done]
        if not live:
            break
        room = {i: limits.max_context_tokens - len(eps[i].context_ids) for i in live}
        sp = dataclasses.replace(sampling, max_new_tokens=min(turn_cap, max(room.values())))
        turns = sampler.sample([eps[i].context_ids for i in live], sp, [stable_seed(seeds[i], "turn", t) for i in live])
        for i, turn in zip(live, turns):
            e, n = eps[i], min(len(turn.ids), room[i], turn_cap)
            e.segments.append(Segment("assistant", turn.ids[:n], True, turn.logprobs[:n]))
            e.turns += 1
            if len(turn.ids) > room[i] or (n == room[i] and turn.reason == "length" and room[i] < turn_cap):
                e.finish_reason = "context"  # the turn was cut by the context cap, not by its own budget
        acting = [i for i in live if not eps[i].done]
        replies = step_all([envs[i] for i in acting], [decode(eps[i].segments[-1].ids) for i in acting], workers)
        for i, (obs, done, answer) in zip(acting, replies):
            _after_step(eps[i], obs, done, answer, t + 1 == limits.max_turns, limits, fmt)
    return eps


def _after_step(
    e: Episode, obs: str, done: bool, answer: str | None, last: bool, limits: EpisodeLimits, fmt: ObservationFormat
) -> None:
    """Ends ``e`` (answered, done, out of turns, out of context) or appends the observation's ids."""
    if done:
        e.finish_reason, e.answer = ("answer" if answer is not None else "done"), answer
        return
    if last:
        e.finish_reason = "turns"
        return
    ids = fmt.ids(obs, limits.max_obs_tokens, e.segments[-1].ids)
    if len(e.context_ids) + len(ids) >= limits.max_context_tokens:  # no room for the observation and a reply
        e.finish_reason = "context"
        return
    e.segments.append(Segment("observation", ids, False))
