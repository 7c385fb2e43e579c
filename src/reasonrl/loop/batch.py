"""Building one step's training batch: prompts -> groups -> rewards -> (filter, refill) -> advantages.

Kept apart from the optimisation loop (:mod:`reasonrl.loop.trainer`), and just as blind to method names:
dynamic sampling is the recipe's ``group_filter`` part, shaping its ``shapers`` and
``extra_rewards``, overlong filtering its ``mask_truncated`` flag.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Iterator

import torch

from ..data.pool import epoch_of, pool_stream, take_pool
from ..data.selector import prompt_hash
from ..distill import ContextScores, encode_contexts, score_under_context
from ..models.chat import PLAIN, PromptFormatter
from ..parts import Recipe
from ..parts.protocol import RoundContext, hook_result, part_needs
from ..parts.strategy import GenRequest
from ..rollout import HFEngine, Rollouts, SamplingParams, concat_rollouts, select_rows
from ..rollout.branch import branch
from ..errors import UserError
from .batch_score import BatchScoring
from .runtime import PartRuntime
from .stepdata import Batch, join_groups, keep_groups, merge_metrics, step_stats  # noqa: F401 - the batch's types
from ..tasks import Item, Task, TaskReward
from ..tasks.protocols import Fitting, provides


class BatchMaker(BatchScoring):
    # rewards, advantages, the loss mask and the selector (reward, prepare, select, ...) are the mixin's:
    # loop/batch_score.py
    def __init__(
        self,
        task: Task,
        recipe: Recipe,
        engine: HFEngine,
        budget: int,
        seed: int,
        ref_model=None,
        micro_batch_size: int = 64,
        pool: int = 0,
        formatter: PromptFormatter | None = None,
    ):
        # no RNG of its own: every rollout's randomness is keyed by the task position (``_generate``)
        self.task, self.recipe, self.engine, self.budget = task, recipe, engine, budget
        self.formatter = formatter or getattr(engine, "formatter", None) or PLAIN  # renders what reaches the engine
        self.seed, self.ref, self.micro = seed, ref_model, micro_batch_size
        self.owns: Callable[[torch.Tensor], torch.Tensor] = lambda g: torch.ones_like(g, dtype=torch.bool)  # ranks
        self.reward_fn = TaskReward(task)
        self.strategy = recipe.strategy  # plain, beam, steered, hinted, ...: one generate() for all
        self.strategy_key = next((k for k, _ in recipe.hooked("generate")), "sampling")
        self.source = _one_source(recipe)  # (key, part) whose draw() replaces the task's stream (self-play), or None
        self.seconds = {"generate": 0.0, "score": 0.0}  # phase timings of the current step
        self.items_drawn = 0
        self.short_batches = 0  # batches that came out short of groups after the filter's rounds (trainer state)
        self.step, self.total_steps = 0, 1  # training progress, for schedules over training (set_progress)
        # data.pool=N: the first N distinct train items, cycled in seeded epochs (data.pool)
        self.pool = take_pool(task.iter_items("train", seed), pool, f"task {task.name!r}") if pool else None
        _check_pool(recipe, self.pool, task.name)
        self.parts = PartRuntime(recipe, seed)  # each part's state (checkpointed) and cache, by its key
        self.stream: Iterator[Item] = self._new_stream()

    @property
    def selector(self):
        """The selector part's state (None: every prompt, every group)."""
        return self.parts.selector

    def _new_stream(self) -> Iterator[Item]:
        return self.task.iter_items("train", self.seed) if self.pool is None else pool_stream(self.pool, self.seed)

    def seek(self, items_drawn: int) -> None:
        """Restore the task position by replaying the seeded stream (used on resume)."""
        self.stream = self._new_stream()
        for _ in range(items_drawn):
            next(self.stream)
        self.items_drawn = items_drawn

    def set_progress(self, step: int, total_steps: int) -> None:
        """The training step about to run (0-based) and the run's total: parts with a schedule over
        training (the steering anneal) read them; the maker never knows which method asks."""
        self.step, self.total_steps = step, total_steps

    def draw(self, n: int) -> tuple[list[Item], dict[str, float]]:
        """``n`` items and the drawing part's metrics (none for the task's stream)."""
        if self.source is not None:  # a self-play part supplies the items; positions still count for seeding
            key, part = self.source
            items, metrics = hook_result(key, "draw", part.draw(self.round_context(key, None), n))
            self.items_drawn += len(items)
            return [self._fitted(item) for item in items], dict(metrics)
        if self.selector is not None:
            return self._draw_admitted(n), {}
        self.items_drawn += n
        return [next(self.stream) for _ in range(n)], {}

    def _fitted(self, item: Item) -> Item:
        """A self-play item under the run's prompt limit (tasks.limits), truncated by prompt.overflow=
        truncate_left; one that would be dropped stops the run (the part's roles are per item)."""
        fitted = self.task.fit(item, "train") if provides(self.task, Fitting) else item
        if fitted is None:
            raise UserError(
                f"self-play prompt {item.key!r} is longer than the prompt limit ({self.task.cap} tokens); "
                "raise prompt.max_tokens, lower sampling.max_new_tokens or use prompt.overflow=truncate_left"
            )
        return fitted

    def _draw_admitted(self, n: int) -> list[Item]:
        """``n`` items the selector admits (it skips e.g. pruned prompts), drawing at most two
        epochs beyond ``n``; an item's epoch is its stream position // the pool size."""
        out, limit = [], self.items_drawn + n + 2 * len(self.pool or ())
        while len(out) < n and self.items_drawn < limit:
            item, pos = next(self.stream), self.items_drawn
            self.items_drawn += 1
            if self.selector.admit(item, epoch_of(pos, len(self.pool or ()))):
                out.append(item)
        return out

    def rollout(self, n_prompts: int) -> tuple[list[Item], Rollouts, dict[str, float]]:
        """The items, their rollouts and the metrics of the ``draw`` and ``generate`` hooks."""
        first, t0 = self.items_drawn, time.perf_counter()  # the task position of the first item
        items, drawn = self.draw(n_prompts)
        ro, generated = self._generate(items, first)
        self.seconds["generate"] += time.perf_counter() - t0
        return items, ro, {**drawn, **generated}

    def _request(self, items: list[Item], first: int) -> GenRequest:
        return GenRequest(
            items=items,
            first=first,
            engine=self.engine,
            task=self.task,
            group_size=self.recipe.group_size,
            sampling=self._sampling_params(),
            seed=self.seed,
            step=self.step,
            total_steps=self.total_steps,
            cache=self.parts.cache(self.strategy_key),
            formatter=self.formatter,
        )

    def _generate(self, items: list[Item], first: int) -> tuple[Rollouts, dict[str, float]]:
        """Rollouts of ``items`` (drawn at task positions ``first``, ``first + 1``, ...) by the recipe's
        rollout strategy (plain, beam, steered, hinted sub-groups, ...). Every strategy keys its
        randomness by the task position: a resumed run, any split into ranks or workers and a change
        of the minibatch order all leave a prompt's samples alone."""
        ro, metrics = hook_result(self.strategy_key, "generate", self.strategy.generate(self._request(items, first)))
        return ro, dict(metrics)

    def _sampling_params(self) -> SamplingParams:
        s = self.recipe.sampling
        needs = {k: v for fn, _ in self.recipe.extra_rewards for k, v in getattr(fn, "sampling_needs", {}).items()}
        return SamplingParams(
            temperature=s.temperature, top_p=s.top_p, top_k=s.top_k, min_p=s.min_p, max_new_tokens=self.budget, **needs
        )  # needs: statistics a reward reads (CorR-PO)

    def upcoming(self, n_prompts: int) -> tuple[list[str], int, SamplingParams, list[int]] | None:
        """The ``generate`` request (prompts, group size, sampling, seeds) of the next ``rollout(n_prompts)``
        with plain sampling, without drawing its items: an asynchronous engine starts it early
        (``rollout.async``). None for any other strategy."""
        if not getattr(self.strategy, "prefetchable", False) or self.selector is not None or self.source is not None:
            return None  # a selector's admissions (a source's items) depend on the rewards still to come
        self.stream, ahead = itertools.tee(self.stream)  # a tee of a tee copies it: no nesting per step
        items = list(itertools.islice(ahead, n_prompts))
        req = self._request(items, self.items_drawn)
        return self.formatter.render_all([it.prompt for it in items]), self.recipe.group_size, req.sampling, req.seeds()

    # ---------------------------------------------------------------- what second rounds use
    def sample(self, items: list[Item], prompts: list, tag: str, first: int, n: int | None = None) -> Rollouts:
        """``n`` (default G) plain samples for each of ``prompts`` (one per item: its own prompt, or a
        context the formatter built), keyed by the item's task position ``first + i`` and ``tag``."""
        req = self._request(items, first)
        return self.engine.generate(
            self.formatter.render_all(prompts), n or self.recipe.group_size, req.sampling, seeds=req.seeds(tag)
        )

    def branch(
        self,
        source: Rollouts,
        rows: list[int],
        cuts: list[int],
        generator: torch.Generator,
        contexts: list[str] | None = None,
    ) -> Rollouts:
        """Continuations of ``source``'s ``rows`` from their first ``cuts`` tokens, under ``contexts`` (STRIDE)."""
        contexts = None if contexts is None else self.formatter.render_all(contexts)
        return branch(self.engine, source, rows, cuts, self._sampling_params(), generator, contexts=contexts)

    def score_under(self, contexts: list, ro: Rollouts, rows: torch.Tensor, **reduce) -> ContextScores:
        """The policy's scores of ``ro``'s completion tokens at ``rows`` under other prompts (no grad)."""
        ids, mask = encode_contexts(self.engine.tok, self.formatter.render_all(contexts))
        return score_under_context(
            self.engine.model,
            ids,
            mask,
            ro.completion_ids[rows],
            ro.completion_mask[rows],
            temperature=self.recipe.sampling.temperature or 1.0,
            chunk_rows=self.micro,
            **reduce,
        )

    def round_context(self, key: str, batch: Batch | None) -> RoundContext:
        """What the part ``key`` sees in ``extend`` (``batch``: the first round), ``draw`` and ``before_step``
        (None)."""
        return self.parts.grant(
            key,
            RoundContext(
                batch=batch,
                task=self.task,
                tok=self.engine.tok,
                seed=self.seed,
                step=self.step,
                position=self.items_drawn,
                group_size=self.recipe.group_size,
                pool=self.pool,
                state=self.parts.state(key),
                cache=self.parts.cache(key),
                sampling=self._sampling_params(),
                micro=self.micro,
                policy=self.engine.model,
                in_process=getattr(self.engine, "push_weights", None) is None,
                device=self.engine.device,
                sample=self.sample,
                branch=self.branch,
                reward=self.reward,
                score_under=self.score_under,
                advantage=self.recipe.advantage,
                reference=None if self.ref is None else self.ref.scoring,
                formatter=self.formatter,
            ),
        )

    def collect(self, n_prompts: int) -> Batch:
        """Generate and reward ``n_prompts`` groups; with a group filter, drop the groups it rejects
        and generate more, for up to its ``round_limit`` rounds (``max_rounds=None``: until full, or
        an error at the cap). Step statistics describe everything generated."""
        f, G = self.recipe.group_filter, self.recipe.group_size
        kept: list[tuple[list[Item], Rollouts, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]] = []
        stats: list[tuple[float, dict[str, float]]] = []
        n_kept, generated, rounds = 0, 0, 0
        while rounds < (f.round_limit if f else 1) and n_kept < n_prompts:
            items, ro, hooked = self.rollout(n_prompts)
            rewards, correct, metrics, terms = self.reward_terms(items, ro)
            scores = self.selector.observe(items, correct) if self.selector else torch.full((len(items),), float("nan"))
            rounds, generated = rounds + 1, generated + len(items)
            stats.append(
                (
                    float(len(ro.texts)),
                    {**step_stats(rewards, correct, ro), **metrics, **ro.extras.get("metrics", {}), **hooked},
                )
            )
            keep = f.keep(rewards, correct) if f else torch.ones(len(items), dtype=torch.bool)
            groups = keep.nonzero().squeeze(-1).tolist()[: n_prompts - n_kept]
            if groups:
                rows = [g * G + j for g in groups for j in range(G)]
                kept.append(
                    (
                        [items[g] for g in groups],
                        select_rows(ro, rows),
                        rewards[groups],
                        correct[groups],
                        scores[groups],
                        {k: v[rows] for k, v in terms.items()},
                    )
                )
                n_kept += len(groups)
        out = merge_metrics(stats, additive=lambda key: key.startswith("tokens/"))  # token counts add up
        if f:
            _check_refill(f, n_kept, n_prompts, rounds, generated)
            self.short_batches += int(n_kept < n_prompts)
            out.update(
                {
                    "dynamic/rounds": rounds,
                    "dynamic/prompts_generated": generated,
                    "dynamic/groups_kept": n_kept,
                    "dynamic/groups_dropped": generated - n_kept,
                    "dynamic/batch_short": float(n_kept < n_prompts),
                    "dynamic/short_batches_total": float(self.short_batches),
                }
            )
        if not kept:  # every group filtered out: an empty batch (the update then has nothing to do)
            return Batch([], select_rows(ro, []), torch.zeros(0, G), torch.zeros(0, G), metrics=out)
        ro = concat_rollouts([k[1] for k in kept], self.engine.tok.pad_token_id)
        return Batch(
            sum((k[0] for k in kept), []),
            ro,
            torch.cat([k[2] for k in kept]),
            torch.cat([k[3] for k in kept]),
            metrics=out,
            scores=torch.cat([k[4] for k in kept]) if self.selector else None,
            reward_terms={name: torch.cat([k[5][name] for k in kept]) for name in kept[0][5]},
        )

    def extend(self, b: Batch) -> Batch:
        """The recipe's second rounds (corrections, redirections, a teacher's round), each built from the
        first round's groups alone; the k-th round's groups get kind k and its ``Groups.data`` lands in
        its channel."""
        first = b
        for kind, (key, rnd) in enumerate(self.recipe.rounds, start=1):
            if not len(first.items):  # every group filtered out: nothing to build a round from
                continue
            t0 = time.perf_counter()
            groups, metrics = hook_result(key, "extend", rnd.extend(self.round_context(key, first)))
            self.seconds["generate"] += time.perf_counter() - t0
            if groups is not None and len(groups.items):
                b = join_groups(b, groups, kind, self.engine.tok.pad_token_id)
            b.metrics.update(metrics)  # after the join: the joined batch carries the first round's metrics
            if groups is not None:
                b.channel(key).values.update(groups.data)
        return b

    def make(self, n_prompts: int) -> Batch:
        pre = {
            k: v
            for key, part in self.recipe.hooked("before_step")  # parts that prepare the step (D2Evo's estimation)
            for k, v in hook_result(key, "before_step", part.before_step(self.round_context(key, None)))[1].items()
        }
        b = self.select(self.prepare(self.extend(self.collect(n_prompts))))
        b.metrics.update(pre)
        return b

    def known_prompts(self) -> dict[str, str] | None:
        """key -> prompt digest of every item the run can draw (its pool), for a resumed selector's check."""
        return None if self.pool is None else {it.key: prompt_hash(it.prompt) for it in self.pool}


def _one_source(recipe: Recipe) -> tuple[str, Any] | None:
    """The part whose ``draw`` supplies the first round's items; two of them are an error."""
    found = recipe.hooked("draw")
    if len(found) > 1:
        raise ValueError(f"a recipe can draw its items from one part, got {', '.join(k for k, _ in found)}")
    return found[0] if found else None


def _check_pool(recipe: Recipe, pool: list[Item] | None, task: str) -> None:
    """A part that keeps per-prompt state across epochs needs prompts that recur (``needs`` "pool")."""
    if "pool" in recipe.needs and pool is None:
        owner = next(k for k, p in recipe.hooked() if "pool" in part_needs(p))
        raise UserError(
            f"recipe {recipe.name!r}: its part {owner!r} keeps per-prompt state across epochs, so it "
            f"needs prompts that recur: set data.pool=N (the first N distinct train problems of {task!r})"
        )


def _check_refill(f, n_kept: int, n_prompts: int, rounds: int, generated: int) -> None:
    """Refill-until-full (``max_rounds=None``) that hit its cap fails loudly rather than train on a
    short batch nobody asked for."""
    if f.max_rounds is None and n_kept < n_prompts:
        raise RuntimeError(
            f"dynamic sampling (group_filter.max_rounds=null: refill until full) kept {n_kept} of {n_prompts} groups "
            f"after {rounds} rounds, the cap group_filter.max_rounds_cap={f.max_rounds_cap} ({generated} prompts "
            f"generated; every other group's {f.metric} was the same for all its samples): the prompts are too easy "
            f"or too hard for the model. Raise group_filter.max_rounds_cap, set a finite group_filter.max_rounds to "
            f"accept short batches, or train on prompts of matching difficulty."
        )
