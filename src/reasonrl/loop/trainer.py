"""The RL loop, algorithm-blind: it receives a :class:`~reasonrl.parts.Recipe` and calls its parts.

One step: draw prompts -> generate G completions each (behaviour log-probs stored) -> reward ->
advantages (estimator, then shapers) -> ``mu`` passes of ``minibatches`` optimiser steps over the
batch. With stages (Mu-GRPO) a stage's buffer is generated once and its epochs are spread over the
stage's steps, still ``mu * minibatches`` optimiser steps per step (:class:`~reasonrl.parts.Stages`),
so the LR schedule spans ``steps * mu * minibatches`` optimiser steps either way. Every loss term
is normalised by the *global* token / sequence count of its minibatch, so micro-batching changes
memory use and nothing else.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import torch

from .schedule import group_rows, make_optimizer, param_groups, split_even
from .checkpoint import atomic_write, latest_checkpoint, rng_state, save_checkpoint, set_rng_state
from ..config.train import TrainConfig
from ..dist.group import Single
from ..dist.shard import ShardedEngine
from ..dist.choose import make_strategy
from ..eval.runner import EvalConfig, evaluate, task_max_new_tokens
from .batch import BatchMaker
from .update import UpdateSteps
from .stepdata import Batch, step_stats
from ..rollout import select_rows
from ..models.lora import Reference, apply_lora
from ..models.memory import prepare_for_training, resolve_rows
from ..parts import Recipe
from ..parts.protocol import ModelSetup, UpdateContext, hook_result
from ..dist.ray_rollout import EngineCorrection, WorkerError, make_engine
from ..tasks import Task
from ..tasks.limits import prepare_prompts
from ..tasks.base import stable_seed

ZERO_LOSS_HINT = (
    "loss/policy ~ 0 is expected with mu=1 and no KL: the ratio is 1 and advantages are centred, "
    "so the surrogate's value is ~0 while its gradient is not."
)


class NonFiniteError(RuntimeError):
    pass


class Trainer(UpdateSteps):
    # the update (update, _optimizer_step, _micro_loss, _rows_with_gradient) is the mixin's: loop/update.py
    def __init__(
        self,
        model,
        tokenizer,
        task: Task,
        recipe: Recipe,
        cfg: TrainConfig,
        run_dir: Path,
        log: Callable[[dict], None] = lambda m: None,
        group: Single = Single(),
    ):
        model = apply_lora(model, cfg.lora, cfg.seed)  # lora.r > 0: adapters only train (peft wraps the model in place)
        # parts that add trainable modules (a second adapter) first; the setup hooks' metrics (and the run's
        # wrap_task's, run.py adds them) are logged with this process's first step
        self.setup_metrics: dict[str, float] = {}
        setup = ModelSetup(model=model, seed=cfg.seed, task=task, tokenizer=tokenizer)
        model = _setup_model(recipe, setup, self.setup_metrics)
        # memory (models.memory): fp32 master weights under bf16 autocast, activation checkpointing, and
        # max_rows / micro_batch_size = auto resolved from free device memory (self.cfg holds the numbers)
        model = prepare_for_training(model, cfg.dtype, cfg.master_fp32, cfg.memory.gradient_checkpointing)
        budget = recipe.sampling.max_new_tokens or task_max_new_tokens(task)
        # prompts as the model sees them (prompt.*: the chat template or plain text), only those that fit its context
        self.formatter, task = prepare_prompts(
            task, tokenizer, model, cfg.prompt, budget, cfg.model or "the shipped base"
        )
        cfg = resolve_rows(cfg, model, tokenizer, task, needs_reference="reference" in recipe.needs, new_tokens=budget)
        self.engine = make_engine(model, tokenizer, cfg)  # in-process, or Ray rollout workers (rollout.workers)
        if hasattr(self.engine, "formatter"):  # in-process: items' prompts (beam, steering) rendered as the run's
            self.engine.formatter = self.formatter
        # the reference, only when a KL term or a part (FEST's DPO) will use it: a frozen copy of the
        # initial model (taken before any sharding), or with LoRA the adapters off
        self.ref = Reference(model) if "reference" in recipe.needs else None
        self.dist = make_strategy(cfg.dist.strategy, group)  # the model replicated on every rank, or FSDP shards
        model = self.dist.wrap(model)  # in place: the engine's model is this one
        self.model, self.tok, self.task, self.recipe, self.cfg = model, tokenizer, task, recipe, cfg
        self.run_dir, self.log, o = Path(run_dir), log, recipe.optim
        # the parts' own trainable modules (a critic): their own parameter groups, clips and checkpoint files
        self.modules = _setup_modules(recipe, dataclasses.replace(setup, model=model, task=task), self.setup_metrics)
        # the policy's trainable parameters (FSDP: this rank's shards), then each part module's group
        total = cfg.steps * o.mu * o.minibatches  # scheduled minibatch steps, stages or not (an empty one still counts)
        self.opt, self.sched = make_optimizer(param_groups(self.dist.trainable, self.modules, o), o, total)
        self.params = [p for g in self.opt.param_groups for p in g["params"]]
        self.total_optimizer_steps = total  # the horizon of step-scheduled loss knobs (SAGE's guide schedule)
        self.group = group  # data-parallel ranks (dist.group): generation and the update are split over them
        self.engine = ShardedEngine(self.engine, group) if group.world > 1 else self.engine
        self.budget = budget  # max new tokens per completion (the limit prompts were held to above)
        self._start_loop(task, recipe, cfg, group)

    def _start_loop(self, task: Task, recipe: Recipe, cfg: TrainConfig, group: Single) -> None:
        """The run's random streams, the batch maker and the step bookkeeping (after the model is set up)."""
        # the run's own RNG, on the model's device so sampling never leaves it; saved in checkpoints
        self.sampler = torch.Generator(device=self.engine.device).manual_seed(cfg.seed)
        # the noise of stochastic loss terms (SAGE's token/random guides): its own stream, so turning
        # such a term on leaves the rollouts' sampling alone; saved in checkpoints like the sampler
        self.loss_rng = torch.Generator(device=self.engine.device).manual_seed(stable_seed(cfg.seed, "loss_rng"))
        self.correction = EngineCorrection.of(cfg.rollout)  # issue 43: vLLM's rollouts weighted to the trainer's policy
        self.batches = BatchMaker(
            task,
            recipe,
            self.engine,
            self.budget,
            cfg.seed,
            self.ref,
            cfg.micro_batch_size,
            pool=cfg.data.pool,
            formatter=self.formatter,
        )
        self.batches.owns = group.owns  # reference log-probs of this rank's groups only
        self.batches.parts.modules = self.modules
        self.step, self.nonfinite_total, self.nonfinite_streak = 0, 0, 0
        # what this process did, apart from what a checkpoint carried over (resume reports prove it)
        self.resumed_from: Path | None = None
        self.resume_info: dict[str, Any] = {}  # what the checkpoint restored beyond the step (events.jsonl)
        self.steps_this_process = 0
        self.stage: dict[str, Any] | None = None  # Mu-GRPO stage buffer: batch, group order, position
        self.on_batch: Callable[[int, Batch], None] = lambda step, b: None  # per-prompt records (run.py)

    # ---------------------------------------------------------------- state
    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "items_drawn": self.batches.items_drawn,
            "nonfinite_total": self.nonfinite_total,
            "nonfinite_streak": self.nonfinite_streak,
            "rng": rng_state(self.sampler),
            "stage": self.stage,
            "loss_rng": self.loss_rng.get_state(),
            "short_batches": self.batches.short_batches,
            "parts": self.batches.parts.state_dict(),
        }  # each part's state (buffers, pools, ratings, selector)

    def save(self) -> Path:
        """Rank 0 writes (the ranks hold the same state, FSDP's gathered whole); every rank gets the path."""
        path, (weights, optim) = None, self.dist.full_state(self.model, self.opt)  # every rank takes part
        if self.group.is_main:
            path = save_checkpoint(
                self.run_dir,
                self.step,
                self.model,
                self.opt,
                self.sched,
                self.state(),
                self.cfg.keep_last,
                weights=weights,
                optimizer_state=optim,
                modules=self.batches.parts.named_modules(),
            )
        return self.group.broadcast(path)

    def resume(self) -> int | None:
        """Continue from the latest checkpoint, if any; returns its step."""
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return None
        st = self.dist.load_checkpoint(
            path, self.model, self.opt, self.sched, modules=self.batches.parts.named_modules()
        )
        if self.ref is not None and self.ref.has_weights:  # the run's *initial* model, saved beside the checkpoints
            self.ref.frozen.load_state_dict(
                torch.load(self.run_dir / "checkpoints" / "reference.pt", weights_only=True)
            )
        self.step, self.nonfinite_total, self.nonfinite_streak = (
            st["step"],
            st["nonfinite_total"],
            st["nonfinite_streak"],
        )
        self.batches.seek(st["items_drawn"])  # the task position
        self.stage = st.get("stage")  # a stage's buffer resumes where it stopped
        self.batches.short_batches = st.get("short_batches", 0)  # the cumulative short-batch count continues
        self.resume_info = self.batches.parts.restore(st, self.batches.known_prompts())  # every part's state
        set_rng_state(st["rng"], self.sampler)
        if "loss_rng" in st:  # absent only in checkpoints written before any loss term drew noise
            self.loss_rng.set_state(st["loss_rng"])
        self.resumed_from = path
        self._push_weights()
        return self.step

    # ---------------------------------------------------------------- update (the rest: loop/update.py)
    @property
    def optimizer_steps(self) -> int:
        """Optimiser steps taken so far (the LR scheduler counts them, and is checkpointed)."""
        return self.sched.last_epoch

    # ---------------------------------------------------------------- loop
    def next_batch(self) -> tuple[Batch, list[torch.Tensor] | None, dict[str, float]]:
        """This step's batch and, in a stage, the minibatches (row sets) of it this step trains on:
        the stage's minibatch steps j = pos * mu * M .. (pos + 1) * mu * M - 1, epoch j // (S * M)."""
        stages = self.recipe.stages
        self.batches.set_progress(self.step, self.cfg.steps)
        if stages is None:
            return self.batches.make(self.cfg.prompts_per_step), None, {}
        if self.stage is None or self.stage["pos"] >= self.stage["steps"]:
            self.stage = self._new_stage(stages.steps_per_stage(self.cfg.steps))
        st, M, G = self.stage, self.recipe.optim.minibatches, self.recipe.group_size
        orders = torch.atleast_2d(st["order"])  # (mu, B) one permutation of the groups per epoch
        per_epoch, per_step = st["steps"] * M, len(orders) * M
        js = range(st["pos"] * per_step, (st["pos"] + 1) * per_step)
        minibatches = [group_rows(split_even(orders[j // per_epoch], per_epoch)[j % per_epoch], G) for j in js]
        info = {
            "stage/staleness": (js[0] + js[-1]) / 2,
            "stage/staleness_max": float(js[-1]),
            "stage/fresh": float(st["pos"] == 0),
        }  # staleness: policy versions since the stage's generation
        st["pos"] += 1
        return st["batch"], minibatches, info

    def _new_stage(self, per_stage: int) -> dict[str, Any]:
        """Generate a stage's buffer with the current (frozen) policy and draw its epochs' orders."""
        steps = min(per_stage, self.cfg.steps - self.step)  # the last stage may be shorter
        batch = self.batches.make(self.cfg.prompts_per_step * steps)
        orders = [
            torch.randperm(len(batch.items), generator=self.sampler, device=self.sampler.device).cpu()
            for _ in range(self.recipe.optim.mu)
        ]
        return {"batch": batch, "order": torch.stack(orders), "pos": 0, "steps": steps}

    def train_step(self) -> dict[str, float]:
        t0, comm0 = time.perf_counter(), self.group.seconds
        self.batches.seconds = {"generate": 0.0, "score": 0.0}
        batch, minibatches, stage_info = self.next_batch()
        t1 = time.perf_counter()
        stage_info = {**stage_info, **self._before_update(batch)}
        if stage_info.get("stage/fresh", 1.0):  # a stage's buffer once, when generated
            self.on_batch(self.step + 1, batch)
        upd = self.update(batch, minibatches)
        upd.update(self._after_step())
        t2 = time.perf_counter()
        self.step += 1
        self.steps_this_process += 1
        gen_s = self.batches.seconds["generate"]
        metrics, rows = batch.metrics, None
        if minibatches is not None:  # the stats of the groups this step trains on; the buffer's own once, when fresh
            G = self.recipe.group_size
            groups = torch.tensor(
                list(dict.fromkeys(g for mb in minibatches for g in (mb[::G] // G).tolist())), dtype=torch.long
            )  # each once, in first-trained order
            rows = group_rows(groups, G)
            share = (
                step_stats(batch.rewards[groups], batch.correct[groups], select_rows(batch.ro, rows.tolist()))
                if len(groups)
                else {}
            )
            metrics = {**(batch.metrics if stage_info["stage/fresh"] else {}), **share}
        tokens = float(batch.ro.lengths.sum()) if rows is None else float(batch.ro.lengths[rows].sum())
        m = {
            "step": self.step,
            **metrics,
            **stage_info,
            **upd,
            "lr": self.sched.get_last_lr()[0],
            "time/generate": gen_s,
            "time/score": t1 - t0 - gen_s,
            "time/update": t2 - t1,
            "time/comm": self.group.seconds - comm0,  # in collectives (gathers, the gradient sum): 0 in one process
            "tokens_per_s/generate": float(batch.metrics.get("tokens/generated", 0.0)) / max(gen_s, 1e-9)
            if gen_s
            else 0.0,
            "tokens_per_s/step": tokens / max(t2 - t0, 1e-9),
            **self.setup_metrics,  # the setup hooks', once: with this process's first step
        }
        self.setup_metrics = {}
        self._guard_nonfinite(upd.get("nonfinite", 0.0))
        m["nonfinite_total"] = self.nonfinite_total
        return m

    def _after_step(self) -> dict[str, float]:
        """The parts' ``after_step`` hooks (EMA copies, population updates), after the optimiser steps."""
        out: dict[str, float] = {}
        for key, hook in self.recipe.calls("after_step"):
            ctx = UpdateContext(
                model=self.model,
                optimizer=self.opt,
                step=self.step + 1,
                seed=self.cfg.seed,
                state=self.batches.parts.state(key),
            )
            out.update(hook_result(key, "after_step", hook(self.batches.parts.grant(key, ctx)))[1])
        return out

    def _guard_nonfinite(self, skipped: float) -> None:
        if not skipped:
            self.nonfinite_streak = 0
            return
        self.nonfinite_total += int(skipped)
        self.nonfinite_streak += 1
        if self.nonfinite_streak >= self.cfg.max_nonfinite:
            path = self.save()
            raise NonFiniteError(
                f"{self.nonfinite_streak} steps in a row had a NaN/inf loss or gradient (last at step {self.step}); "
                f"stopped. State saved to {path}. Lower optim.lr, check the rewards, or raise max_nonfinite."
            )

    def train(self) -> None:
        if (
            self.step == 0 and self.ref is not None and self.ref.has_weights and self.group.is_main
        ):  # LoRA: the base itself
            (self.run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
            atomic_write(
                self.run_dir / "checkpoints" / "reference.pt", lambda tmp: torch.save(self.ref.frozen.state_dict(), tmp)
            )
        while self.step < self.cfg.steps:
            drawn = self.batches.items_drawn
            try:
                m = self.train_step()
            except WorkerError as err:
                raise self._stop_on_worker_error(err, drawn) from err
            if self.cfg.eval_every and (self.step % self.cfg.eval_every == 0 or self.step == self.cfg.steps):
                ev, _ = evaluate(
                    self.engine,
                    self.task,  # the trainer's engine: split over ranks or workers
                    EvalConfig(
                        n_problems=self.cfg.eval_problems,
                        samples_per_problem=0,
                        seed=self.cfg.eval_seed,
                        max_new_tokens=self.budget,
                        max_rows=self.cfg.max_rows,
                    ),
                    formatter=self.formatter,
                )
                m["eval/pass@1"] = ev["pass@1"]
            self.log(m)
            if self.cfg.save_every and (self.step % self.cfg.save_every == 0 or self.step == self.cfg.steps):
                self.save()

    # ---------------------------------------------------------------- rollout workers (dist.ray_rollout)
    def _push_weights(self) -> None:
        """Engines with their own weights (Ray workers, vLLM) get the new ones, versioned by optimiser steps."""
        push = getattr(self.engine, "push_weights", None)
        if push is not None:
            push(self.model, self.optimizer_steps)

    def _before_update(self, batch: Batch) -> dict[str, float]:
        """With ``rollout.async=1``, start the next batch's first round on the workers (with the
        current weights) while this one trains; and the staleness of this batch's rollouts: policy
        versions (optimiser steps) between their generation and this update."""
        n = self._next_make_size() if self.cfg.rollout.async_ else None
        request = self.batches.upcoming(n) if n else None
        if request is not None:
            self.engine.prefetch(*request)
        version = batch.metrics.get("rollout/weight_version")
        return {} if version is None else {"rollout/staleness": self.optimizer_steps - version}

    def _next_make_size(self) -> int | None:
        """Prompts of the batch the next step generates (None: the next step generates none)."""
        nxt, stages = self.step + 1, self.recipe.stages
        if nxt >= self.cfg.steps:
            return None
        if stages is None:
            return self.cfg.prompts_per_step
        if self.stage["pos"] < self.stage["steps"]:  # the next step trains on this stage's buffer
            return None
        return self.cfg.prompts_per_step * min(stages.steps_per_stage(self.cfg.steps), self.cfg.steps - nxt)

    def _stop_on_worker_error(self, err: WorkerError, drawn: int) -> WorkerError:
        """Save the state after the last finished step (the task position as it was) and say so."""
        self.batches.seek(drawn)
        path = self.save()
        return WorkerError(
            f"{err}\nstopped after step {self.step}; its state is saved to {path}. Fix the workers "
            "(or set rollout.workers=0) and continue the run with --resume."
        )


def _setup_model(recipe: Recipe, ctx: ModelSetup, metrics: dict[str, float]) -> Any:
    """The model after each ``setup_model`` part, in order (each gets the model the one before returned)."""
    model = ctx.model
    for key, setup in recipe.calls("setup_model"):
        model, m = hook_result(key, "setup_model", setup(dataclasses.replace(ctx, model=model)))
        metrics.update(m)
    return model


def _setup_modules(recipe: Recipe, ctx: ModelSetup, metrics: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Each ``setup_modules`` part's own trainable modules: part key -> {name: PartModule}."""
    out: dict[str, dict[str, Any]] = {}
    for key, make in recipe.calls("setup_modules"):
        modules, m = hook_result(key, "setup_modules", make(ctx))
        out[key] = dict(modules)
        metrics.update(m)
    return out
