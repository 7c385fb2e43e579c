"""The part protocol: every hook a recipe part may implement, each with the typed, frozen context it gets.

A part is a frozen dataclass whose fields are its options. It joins the loop only through the
methods below (any subset of them); the batch maker and the trainer call them in a fixed order and
never ask which method a part belongs to. ``docs/parts.md`` is this table with examples.

==============================  ==================================================  ====================================
hook                            when                                                returns
==============================  ==================================================  ====================================
``wrap_task(TaskSetup)``        once, where the run builds its task                 (task as the part shows it, metrics)
``setup_model(ModelSetup)``     once, before the optimiser is built                 (model, modules added; metrics)
``setup_modules(ModelSetup)``   once, after ``setup_model``                         ({name: PartModule}, metrics)
``before_step(RoundContext)``   first thing in every batch (``ctx.batch`` is None)  (None, metrics)
``draw(RoundContext, n)``       instead of the task's stream (one part at most)     (n Items, metrics)
``generate(GenRequest)``        the first round (one part per recipe at most)       (Rollouts, group-major, metrics)
Selector ``admit`` /            before rollout / after each round's rewards /       bool / (B,) scores /
``observe`` / ``select``        after the advantages (one selector per recipe)      (B,) kept groups
``extend(RoundContext)``        after the first round is rewarded (and filtered)    (Groups or None, metrics)
``score_batch(BatchContext)``   once per batch, before the advantages are shaped    (None, metrics)
``shape_advantages(adv, ...)``  after the estimator and ``shapers``                 (adv, metrics)
``loss_term(LossContext)``      every micro-batch, beside the policy loss           (loss, metrics)
``after_step(UpdateContext)``   after a step's optimiser steps                      (None, metrics)
==============================  ==================================================  ====================================

Every hook returns ``(value, metrics)`` (the selector's methods aside; ``hook_result`` checks it where the
loop receives it and names the part): ``(None, metrics)`` with nothing to hand back, ``(value, {})`` with
nothing to report. The step hooks' metrics join that step's logged metrics (``draw`` and ``generate``'s
averaged over a group filter's rounds, as the rewards' statistics; ``Groups`` has none: a round reports
through ``extend``'s); the setup hooks' (``wrap_task``, ``setup_model``, ``setup_modules``, once per
process) join the first step the process logs (``Trainer.setup_metrics``: step 1, or the first after a resume).

Declarations (not calls): ``RULES`` (class level: the option rules, ``reasonrl.config.rules.Rule`` per
field name, checked before anything is loaded) and ``needs`` (what the run must provide: a subset
of :data:`NEEDS`). A context carries the step's data for every part, and the abilities of
:data:`ABILITIES` only to a part that declared them (``granted``; the others find None):
``reference`` (the run's initial model), ``hidden`` (the policy's last hidden states in
``loss_term``), ``branch`` (continuations from prefixes, STRIDE), ``char_offsets`` (token character
spans, SAPO), ``extra_labels`` (a second label set scored in the training forward, TGPO),
``optimizer`` (PopuLoRA's PBT resets moments) and ``exclude_rows`` (rows that leave the loss, DISA).
A part never writes the batch itself: it writes its own channel (``ctx.data``) or uses an ability.

A part's own trainable modules (``setup_modules``: a critic, a value head, a log-Z head) are not
the policy's: each gets its own AdamW parameter group (its lr, betas, weight decay) and its own
gradient-norm clip, its weights are checkpointed beside the policy's and restored exactly, and
they never reach ``final/`` or rollout workers. Hooks find them in ``ctx.modules`` (name -> module).

Prompts: ``RoundContext``, ``BatchContext``, ``LossContext`` and ``GenRequest`` carry ``formatter``, the run's
:class:`~reasonrl.models.chat.PromptFormatter`. A part that builds a prompt or a teacher context
does it through it (``render``, ``rewrite``, ``follow_up``), so that a chat model sees templated
turns; for plain prompts these give the part's template string exactly.

A part's data: ``ctx.state`` is the part's own state across steps (a dict, checkpointed; for a
selector part the object its ``build(seed)`` made), ``ctx.cache`` its own per-run cache (not
checkpointed: things recomputed from the run's inputs), and ``ctx.data`` its own channel on the
step's batch (``batch.parts[key]``; a round's ``Groups.data`` lands there). A part reads another
part's channel only by that part's key (``ctx.channels["teacher"]``). A round's groups are marked
with its kind (``ctx.kind``: 0 is the first round), so two rounds in one recipe each find their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Protocol, Sequence, TypeVar, Union

import torch
from torch import Tensor, nn

from ..data.selector import SelectorState
from ..distill import ContextScores
from ..models.chat import PLAIN, PromptFormatter
from ..rollout import Rollouts, SamplingParams
from ..rollout.batch import Batch, Channel, Groups  # noqa: F401 - the step's data, named by the contexts
from ..tasks.base import Item, Task

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase as Tokenizer
else:
    Tokenizer = object  # the run's HF tokenizer (tests pass stand-ins with pad_token_id, decode)
Prompt = Union[str, list[dict[str, str]]]  # a plain prompt or chat messages (models.chat)

# what a part may need the run to provide; policy_in_loss: its loss term runs the policy on inputs of its own
# (a data-dependent number of forwards, which FSDP's per-forward collectives cannot pair across ranks);
# hidden: the trainer's forward also hands the policy's last hidden states to loss_term; own_engine: its rollouts
# need the own decode loop on the trainer's model (forward hooks, adapters switched per row): not vLLM (issue 43)
# (issue 43); branch, char_offsets, extra_labels, optimizer, exclude_rows: the context field of that name
# (extra_labels: set_extra_labels and extra_logp) is given to the parts that declare it, None to the others
NEEDS = (
    "reference",
    "pool",
    "lora",
    "in_process",
    "policy_in_loss",
    "hidden",
    "own_engine",
    "branch",
    "char_offsets",
    "extra_labels",
    "optimizer",
    "exclude_rows",
)
HOOKS = (
    "wrap_task",
    "setup_model",
    "setup_modules",
    "before_step",
    "draw",
    "generate",
    "extend",
    "score_batch",
    "shape_advantages",
    "loss_term",
    "after_step",
)

PART_TYPES: dict[str, type] = {}  # config section / recipe key -> part class, in registration order


def register_part(name: str) -> Callable[[type], type]:
    """Class decorator: ``@register_part("correction")`` makes the class the part behind the config
    section and recipe key ``name`` (``correction.p_max=0.5``, ``Recipe(correction=Correction())``)."""

    def deco(cls: type) -> type:
        if not dataclasses.is_dataclass(cls):
            raise TypeError(f"part {name!r}: {cls.__name__} must be a (frozen) dataclass")
        if PART_TYPES.get(name, cls) is not cls and PART_TYPES[name].__qualname__ != cls.__qualname__:
            raise ValueError(f"part name {name!r} is taken by {PART_TYPES[name].__name__}")
        PART_TYPES[name] = cls
        return cls

    return deco


def part_needs(part: Any) -> frozenset[str]:
    """What ``part`` needs of the run (its ``needs`` attribute or property; nothing when it has none)."""
    out = frozenset(getattr(part, "needs", ()) or ())
    unknown = out - set(NEEDS)
    if unknown:
        raise ValueError(f"{type(part).__name__}.needs has {sorted(unknown)}; valid: {', '.join(NEEDS)}")
    return out


class Parts(Mapping):
    """A recipe's method parts by key: immutable, hashable, in registration order (so a part that
    reads another's channel, TGPO the teacher's, always runs after it), unregistered keys last."""

    def __init__(self, items: Mapping[str, Any] | Sequence[tuple[str, Any]] = ()):
        pairs = dict(items.items() if isinstance(items, Mapping) else items)
        order = {name: i for i, name in enumerate(PART_TYPES)}
        keys = sorted((k for k, v in pairs.items() if v is not None), key=lambda k: (order.get(k, len(order)), 0))
        self._items = tuple((k, pairs[k]) for k in keys)

    def __getitem__(self, key: str) -> Any:
        for k, v in self._items:
            if k == key:
                return v
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return (k for k, _ in self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Parts) and self._items == other._items

    def __repr__(self) -> str:
        return f"Parts({dict(self._items)!r})"

    def merged(self, changes: Mapping[str, Any]) -> "Parts":
        """These parts with ``changes`` applied (a None value turns that part off)."""
        return Parts({**dict(self._items), **changes})


# ------------------------------------------------------------------------------------------ what a part calls
class Sample(Protocol):
    """``RoundContext.sample``: ``n`` (default G) plain samples for each of ``prompts`` (one per item: its
    own prompt, or a context the formatter built), keyed by the item's task position ``first + i`` and ``tag``."""

    def __call__(
        self, items: Sequence[Item], prompts: Sequence[Prompt], tag: str, first: int, n: int | None = None
    ) -> Rollouts: ...


class Branch(Protocol):
    """``RoundContext.branch`` (needs "branch"): continuations of ``source``'s ``rows`` from their first
    ``cuts`` tokens, under ``contexts`` when given (STRIDE)."""

    def __call__(
        self,
        source: Rollouts,
        rows: list[int],
        cuts: list[int],
        generator: torch.Generator,
        contexts: list[str] | None = None,
    ) -> Rollouts: ...


class ScoreUnder(Protocol):
    """``score_under``: the policy's scores of ``ro``'s completion tokens at ``rows`` under other prompts (no grad)."""

    def __call__(self, contexts: Sequence[Prompt], ro: Rollouts, rows: Tensor, **reduce: bool) -> ContextScores: ...


Reward = Callable[
    [list[Item], Rollouts], tuple[Tensor, Tensor, dict[str, float]]
]  # -> (B, n) rewards, correct, metrics
ReferenceScope = Callable[[], ContextManager[nn.Module]]  # the run's reference model, inside a `with`
CharOffsets = Callable[[int], list[tuple[int, int]]]  # row -> each completion token's (start, end) characters
PartState = Union[dict[str, Any], SelectorState]  # a part's state: its dict, or the selector object its build() made

# a declared need -> the context fields it fills; a part that does not declare it finds them None (granted)
ABILITIES: dict[str, tuple[str, ...]] = {
    "reference": ("reference",),
    "hidden": ("hidden",),
    "branch": ("branch",),
    "char_offsets": ("char_offsets",),
    "extra_labels": ("set_extra_labels", "extra_logp"),
    "optimizer": ("optimizer",),
    "exclude_rows": ("exclude_rows",),
}


# ------------------------------------------------------------------------------------------ contexts
@dataclass(frozen=True)
class TaskSetup:
    """``wrap_task``: the run's task (already wrapped by earlier parts), its tokenizer, the seed."""

    task: Task
    tokenizer: Tokenizer | None
    seed: int


@dataclass(frozen=True)
class ModelSetup:
    """``setup_model``: the (LoRA-wrapped) policy and the run's seed; the run's task (as the parts
    present it) and tokenizer, for a part that warm-starts the modules it adds."""

    model: nn.Module
    seed: int
    task: Task | None = None
    tokenizer: Tokenizer | None = None


@dataclass(frozen=True)
class PartModule:
    """What ``setup_modules`` returns per name: a trainable module the part owns beside the policy,
    and its optimiser settings. The trainer gives it an AdamW parameter group of its own (so, AdamW
    being per-parameter, an optimiser of its own) and clips its gradient norm on its own, so a large
    critic gradient never scales the policy's down (verl and OpenRLHF give the critic its own
    optimiser for the same reason). ``schedule=False``: a constant lr (no warm-up, no decay)."""

    module: nn.Module  # on the policy's device
    lr: float
    weight_decay: float = 0.0
    betas: tuple[float, float] | None = None  # None: the recipe's (optim.beta1, optim.beta2)
    max_grad_norm: float | None = None  # None: the recipe's optim.max_grad_norm
    schedule: bool = False  # follow the recipe's LR schedule (optim.warmup_steps, optim.schedule)


@dataclass(frozen=True)
class RoundContext:
    """What a second round (``extend``), ``draw`` and ``before_step`` may use: the first round's groups
    (``batch``, None before the step's rollouts), the run's facts, the part's own state and cache, and
    a narrow sampling surface. Randomness is keyed by task positions: ``position`` is the task position
    after this step's draws (a round's prompts take ``position - len(batch.items) + i``)."""

    batch: Batch | None  # the first round's Batch (kind-0 groups only), or None in before_step / draw
    task: Task
    tok: Tokenizer
    seed: int
    step: int  # 0-based step being made
    position: int
    group_size: int
    pool: Sequence[Item] | None  # the finite train pool (data.pool=N), else None
    state: PartState
    cache: dict[str, object]
    sampling: SamplingParams  # the recipe's (budget and reward needs applied)
    micro: int  # rows per forward pass (memory only)
    policy: nn.Module  # the trainer's policy model (no-grad passes; its adapters are the ones trained)
    in_process: bool  # rollouts are sampled on the policy itself (False: on remote workers' copies)
    device: torch.device | str
    sample: Sample
    reward: Reward
    score_under: ScoreUnder
    advantage: Callable[[Tensor], Tensor]  # the recipe's estimator: (B, G) rewards -> advantages
    formatter: PromptFormatter = PLAIN  # renders prompts and builds contexts (models.chat); chat runs template them
    branch: Branch | None = None  # needs "branch"
    reference: ReferenceScope | None = None  # needs "reference"


@dataclass(frozen=True)
class BatchContext:
    """``score_batch`` and ``shape_advantages``: one step's groups after their rewards (B groups of G)."""

    rewards: Tensor  # (B, G) total reward
    correct: Tensor  # (B, G) raw task accuracy
    answers: list[list[str | None]]  # (B, G) the task's extracted answers
    rollouts: Rollouts  # the batch's (R = B * G rows)
    items: list[Item]  # (B,)
    task: Task
    contexts: Tensor  # (B, G) sub-group of each row (NudgeRL hints; 0 elsewhere)
    kinds: Tensor  # (B,) 0: first round, k: the k-th round's groups
    step: int  # 0-based
    temperature: float
    policy: nn.Module  # no grad passes only
    tok: Tokenizer
    micro: int
    score_under: ScoreUnder
    channels: Mapping[str, Channel]  # every part's channel on the batch, by part key (read)
    data: Channel  # this part's own channel (read and write)
    state: PartState
    formatter: PromptFormatter = PLAIN  # the run's prompt formatter (teacher contexts: rewrite / follow_up)
    modules: Mapping[str, nn.Module] = field(default_factory=dict)  # this part's own modules (setup_modules), by name
    seed: int = 0  # the run's seed (a part's per-batch noise: stable_seed(seed, tag, step))
    reference: ReferenceScope | None = None  # needs "reference"
    char_offsets: CharOffsets | None = None  # needs "char_offsets"
    set_extra_labels: Callable[[Tensor], None] | None = (
        None  # needs "extra_labels": (R, T) ids the training forward scores
    )
    exclude_rows: Callable[[Tensor], None] | None = None  # needs "exclude_rows": (r,) rows that leave the loss


@dataclass(frozen=True)
class LossContext:
    """``loss_term``: one micro-batch (``rows`` of the batch, n of them) inside one optimiser step.
    Normalise by the minibatch-global counts (``n_tokens``, ``n_seqs``) so that any micro-batch split
    gives the same sum."""

    logp: Tensor  # (n, T) the policy's log-probs of the rows' tokens, with grad
    mask: Tensor  # (n, T) tokens the loss sees
    rows: Tensor  # (n,) rows of the batch
    batch: Batch
    model: nn.Module
    tok: Tokenizer
    temperature: float
    train_step: int  # 1-based step being trained
    agg: str
    norm_len: int
    n_tokens: float
    n_seqs: int
    data: Channel  # this part's channel on the batch
    state: PartState
    kind: int  # this part's round kind (-1: not a round)
    formatter: PromptFormatter = PLAIN  # the run's prompt formatter (a prompt re-scored under another context)
    modules: Mapping[str, nn.Module] = field(default_factory=dict)  # this part's own modules, with grad
    reference: ReferenceScope | None = None  # needs "reference": the run's initial model
    extra_logp: Tensor | None = None  # needs "extra_labels": (n, T) log-probs at the batch's extra label ids
    hidden: Tensor | None = (
        None  # needs "hidden": (n, T, H) the policy's last hidden states before each token, with grad
    )

    def agg_kwargs(self) -> dict[str, str | int | float]:
        """The aggregation knobs every token-level term takes (``reasonrl.losses.aggregate``)."""
        return {"agg": self.agg, "norm_len": self.norm_len, "n_tokens": self.n_tokens, "n_seqs": self.n_seqs}

    def minibatch_share(self) -> float:
        """This minibatch's share of the batch's trained rows: ``n_seqs`` / the rows of ``batch`` with a
        token the loss sees (1 with ``optim.minibatches=1``). A term whose normaliser is a count over
        the whole batch (SSOPD's prompts, FEST's pairs) divides by ``count * share``: the policy loss is
        normalised per minibatch, so without it the term's weight relative to the policy loss would
        fall as 1/M with M minibatches (issue #26)."""
        live = int((self.batch.loss_mask.sum(-1) > 0).sum())
        return min(self.n_seqs / live, 1.0) if live else 1.0


@dataclass(frozen=True)
class UpdateContext:
    """``after_step``: the step's optimiser steps are done (EMA teachers, population training)."""

    model: nn.Module
    step: int  # steps done, 1-based
    seed: int
    state: PartState
    optimizer: torch.optim.Optimizer | None = None  # needs "optimizer"


Context = Union[TaskSetup, ModelSetup, RoundContext, BatchContext, LossContext, UpdateContext]
C = TypeVar("C", TaskSetup, ModelSetup, RoundContext, BatchContext, LossContext, UpdateContext)


def granted(ctx: C, needs: frozenset[str]) -> C:
    """``ctx`` as a part with ``needs`` sees it: every ability it did not declare (``ABILITIES``) is None."""
    off = {f for need, fields in ABILITIES.items() if need not in needs for f in fields}
    off &= {f.name for f in dataclasses.fields(ctx)}
    return dataclasses.replace(ctx, **{f: None for f in off}) if off else ctx


def hook_result(key: str, hook: str, out: object) -> tuple[Any, Mapping[str, float]]:
    """A hook's ``(value, metrics)``, checked where the loop receives it: another shape is the part's error."""
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping)):
        raise TypeError(f"part {key!r}: {hook} returned {type(out).__name__}; a hook returns (value, metrics)")
    return out
