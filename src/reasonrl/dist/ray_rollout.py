"""Rollout workers on Ray: ``rollout.workers=N`` generates on N Ray actors, each with its own copy
of the policy, instead of in the trainer's process.

The trainer sees a :class:`RayEngine`, which has the surface the batch maker uses (``generate``,
``tok``, ``device``, ``model``). Plain sampling keys every row's randomness by its prompt's seed and
sample index (:func:`reasonrl.rollout.hf.row_uniforms`), so cutting the prompts into contiguous
shares, one per worker, and concatenating the answers gives exactly the rollouts of one in-process
call. After every update the trainer pushes the new weights (:meth:`RayEngine.push_weights`: the
trainable parameters only, so with LoRA the adapters only); every rollout carries the weight version
it was sampled with and the engine checks it. A worker that dies or fails raises :class:`WorkerError`
naming it (the trainer then saves a checkpoint and stops).

Asynchronous generation (``rollout.async=1``): :meth:`RayEngine.prefetch` starts the next request
early, with the weights the workers hold then; the next :meth:`RayEngine.generate` with the same
request collects it (any other request discards it and generates afresh). The stored behaviour
log-probs make the loss's importance ratio correct for the staleness, which the trainer logs.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..errors import UserError
from ..models.lora import is_lora
from ..models.memory import compute_dtype, install_tf32_head
from ..rollout import HFEngine, Rollouts, SamplingParams, concat_rollouts, engine_for, is_diffusion
from ..rollout.correction import EngineCorrection  # noqa: F401 - the trainer's view of an engine's log-probs (issue 43)

INSTALL_HINT = "pip install ray (or pip install 'reasonrl[ray]')"


class WorkerError(RuntimeError):
    """A rollout worker died, failed or did not answer; the message names it and the cause."""


def import_ray():
    """The ``ray`` module, or a UserError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise UserError(f"rollout.workers > 0 runs rollout workers on Ray, which is not installed: {INSTALL_HINT}; "
                        "or set rollout.workers=0 to generate in the trainer's process") from err
    return ray


def make_engine(model, tok, cfg) -> Any:
    """The trainer's rollout engine: in-process (:class:`HFEngine`, it shares the trainer's model, so
    no weights are ever pushed) for ``rollout.workers=0``, else a :class:`RayEngine`; a colocated vLLM
    engine for ``rollout.engine=vllm`` (:class:`~reasonrl.rollout.vllm.VLLMEngine`). Under mixed
    precision with ``rollout.tf32_head`` the policy's output head computes in TF32 on CUDA."""
    ro = cfg.rollout
    decode = {"check_every": ro.check_every, "static_cache": ro.static_cache, "compile": ro.compile}
    if ro.tf32_head and compute_dtype(model) != next(model.parameters()).dtype:  # mixed precision: the head is float32
        install_tf32_head(model)  # the policy's: the sampler and the learner share it
    if ro.engine == "vllm":  # issue 43: a colocated vLLM with its own weights (rollout/vllm.py)
        from ..rollout.vllm import VLLMEngine

        if is_diffusion(model):
            raise UserError("rollout.engine=vllm cannot sample a masked-diffusion model: use rollout.engine=hf")
        return VLLMEngine(model, tok, ro.vllm, max_rows=cfg.max_rows, seed=cfg.seed, sync_every=ro.sync_every)
    if is_diffusion(model):  # the diffusion sampler: in process only
        if ro.workers > 0:
            raise UserError("a masked-diffusion model samples in the trainer's process: set rollout.workers=0")
        return engine_for(model, tok, max_rows=cfg.max_rows)
    if ro.workers <= 0:
        return HFEngine(model, tok, max_rows=cfg.max_rows, **decode)
    return RayEngine(model, tok, workers=ro.workers, address=ro.address, max_rows=cfg.max_rows, decode=decode)


@dataclass(frozen=True)
class ModelRecipe:
    """How a worker builds a model of the policy's shape (its weights come with the first push):
    the HF config, the dtype and, for a peft model, the adapter config. Picklable."""

    config: Any  # transformers.PretrainedConfig
    dtype: torch.dtype
    peft_config: Any | None  # peft.LoraConfig of the "default" adapter, or None

    @staticmethod
    def of(model) -> "ModelRecipe":
        base = model.get_base_model() if is_lora(model) else model
        peft = copy.deepcopy(model.peft_config["default"]) if is_lora(model) else None
        return ModelRecipe(copy.deepcopy(base.config), next(model.parameters()).dtype, peft)

    def build(self):
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_config(self.config, dtype=self.dtype)
        if self.peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, copy.deepcopy(self.peft_config))
        return model


class RolloutWorker:
    """One Ray actor: an :class:`HFEngine` over its own copy of the policy."""

    def __init__(self, recipe: ModelRecipe, tok, max_rows: int, device: str, decode: dict[str, Any]):
        if device == "cpu":  # workers share the machine's cores: one thread each, no oversubscription
            torch.set_num_threads(1)
        self.model = recipe.build().to(device).eval().requires_grad_(False)
        self.engine = HFEngine(self.model, tok, max_rows=max_rows, **decode)  # the run's decode options
        self.version: int | None = None  # no weights yet: the first push is the full state

    def load(self, state: dict[str, torch.Tensor], version: int, full: bool) -> int:
        """Copy pushed tensors into the model: the whole state (``full``) or named parameters."""
        with torch.no_grad():
            if full:
                self.model.load_state_dict(state, strict=True)
            else:
                params = dict(self.model.named_parameters())
                unknown = sorted(set(state) - set(params))
                if unknown:
                    raise KeyError(f"pushed weights name parameters this worker's model lacks: {unknown[:5]}")
                for name, value in state.items():
                    params[name].copy_(value)
        self.version = version
        return version

    def generate(self, prompts: list[str], n: int, sampling: SamplingParams,
                 seeds: list[int]) -> tuple[Rollouts, int | None]:
        return self.engine.generate(prompts, n, sampling, seeds=seeds), self.version

    def ping(self) -> int | None:
        return self.version


@dataclass
class Pending:
    """Rollouts being generated: one (worker index, object ref) per non-empty share."""

    key: tuple
    refs: list[tuple[int, Any]]
    version: int


def shares(n_items: int, n_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``(start, stop)`` shares of ``n_items`` over ``n_workers`` whose sizes differ by at
    most one, the larger first (10 over 4: 3, 3, 2, 2); empty shares are left out."""
    base, extra = divmod(n_items, n_workers)
    out, start = [], 0
    for w in range(n_workers):
        stop = start + base + (w < extra)
        if stop > start:
            out.append((start, stop))
        start = stop
    return out


class RayEngine:
    """Rollouts from ``workers`` Ray actors. ``model`` stays the trainer's (scoring, evaluation and the
    trainer's RNGs use it and its ``device``); ``timeout_s`` bounds every wait on a worker (None: no
    bound, generation may be long); ``decode``: the workers' HFEngine options (``rollout.check_every``, ...)."""

    def __init__(self, model, tok, *, workers: int, address: str | None = None, max_rows: int = 512,
                 timeout_s: float | None = None, decode: dict[str, Any] | None = None):
        ray = import_ray()
        self.ray, self.model, self.tok, self.timeout_s = ray, model, tok, timeout_s
        self.device = next(model.parameters()).device
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:  # address None: a local Ray instance on this machine; else the user's cluster
            ray.init(address=address, include_dashboard=False)
        self._check_capacity(workers)
        gpu = self.device.type == "cuda"  # workers share the GPUs Ray sees, one fraction each
        actor = ray.remote(num_cpus=1, num_gpus=1 / workers if gpu else 0)(RolloutWorker)
        recipe = ModelRecipe.of(model)
        self.actors = [actor.remote(recipe, tok, max_rows, "cuda" if gpu else "cpu", decode or {}) for _ in range(workers)]
        self.version = 0
        self.pending: Pending | None = None  # an asynchronous request (prefetch)
        self._loads: list[tuple[int, Any]] = []  # weight loads sent, not yet confirmed
        self.push_weights(model, 0, full=True)
        try:
            self._wait(self._loads, "start and load the initial weights")
        except WorkerError:
            self.close()  # no half-started workers left behind
            raise
        self._loads = []

    def _check_capacity(self, workers: int) -> None:
        """Each worker takes one CPU of the cluster: more workers than CPUs would wait forever."""
        cpus = int(self.ray.cluster_resources().get("CPU", 0))
        if workers > cpus:
            self.close()
            raise UserError(f"rollout.workers={workers} but the Ray cluster has {cpus} CPUs (each worker takes one): "
                            f"set rollout.workers <= {cpus}, or add nodes to the cluster")

    # ------------------------------------------------------------ weights
    def push_weights(self, model, version: int, full: bool = False) -> None:
        """Send the trainer's weights to every worker (one ``ray.put``, read by all): the trainable
        parameters (the LoRA adapters of a peft model), or with ``full`` the whole state. The loads
        queue behind any generation in flight (actors run calls in order); failures surface at the
        next :meth:`collect`."""
        state = model.state_dict() if full else {n: p for n, p in model.named_parameters() if p.requires_grad}
        ref = self.ray.put({n: t.detach().cpu() for n, t in state.items()})  # serialised now: a snapshot
        self._loads += [(i, a.load.remote(ref, version, full)) for i, a in enumerate(self.actors)]
        self.version = version

    # ------------------------------------------------------------ generation
    def generate(self, prompts: Sequence[str], n: int, sampling: SamplingParams,
                 generator: torch.Generator | None = None, seeds: Sequence[int] | None = None) -> Rollouts:
        """The rollouts of one in-process ``HFEngine.generate(prompts, n, sampling, seeds=seeds)``.
        A prefetched identical request is collected (sampled with the weights of its time)."""
        key = _key(prompts, n, sampling, seeds)
        pending, self.pending = self.pending, None
        if pending is None or pending.key != key:
            pending = self.submit(prompts, n, sampling, seeds)
        return self.collect(pending)

    def prefetch(self, prompts: Sequence[str], n: int, sampling: SamplingParams, seeds: Sequence[int]) -> None:
        """Start generating a request the next :meth:`generate` is expected to make."""
        self.pending = self.submit(prompts, n, sampling, seeds)

    def submit(self, prompts: Sequence[str], n: int, sampling: SamplingParams,
               seeds: Sequence[int] | None) -> Pending:
        if seeds is None:
            raise ValueError("RayEngine.generate needs seeds (one per prompt): only per-prompt seeds make the rollouts "
                             "independent of how prompts are split over workers; beam and steered rollouts (which "
                             "draw from one generator) need rollout.workers=0")
        if len(seeds) != len(prompts):
            raise ValueError(f"RayEngine.generate: {len(seeds)} seeds for {len(prompts)} prompts (one seed per prompt)")
        prompts, seeds = list(prompts), list(seeds)
        refs = [(w, self.actors[w].generate.remote(prompts[a:b], n, sampling, seeds[a:b]))
                for w, (a, b) in enumerate(shares(len(prompts), len(self.actors)))]
        return Pending(_key(prompts, n, sampling, seeds), refs, self.version)

    def collect(self, pending: Pending) -> Rollouts:
        """Wait for a submitted request; check every share's weight version."""
        loads, self._loads = self._loads, []
        self._wait(loads, "load pushed weights")
        results = self._wait(pending.refs, "generate")
        for (w, _), (_, version) in zip(pending.refs, results):
            if version != pending.version:
                raise RuntimeError(f"rollout worker {w} sampled with weight version {version}, expected "
                                   f"{pending.version}: its weights are out of date (a weight push was lost)")
        ro = concat_rollouts([r for r, _ in results], self.tok.pad_token_id)
        ro.extras["weight_version"] = pending.version
        ro.extras["metrics"] = {**ro.extras.get("metrics", {}), "rollout/weight_version": float(pending.version)}
        return ro

    def _wait(self, refs: list[tuple[int, Any]], what: str) -> list[Any]:
        """``ray.get`` each worker's answer in turn; a dead, failed or silent worker raises WorkerError."""
        errors = self.ray.exceptions
        out = []
        for w, ref in refs:
            try:
                out.append(self.ray.get(ref, timeout=self.timeout_s))
            except (errors.RayActorError, errors.RayTaskError, errors.GetTimeoutError, errors.ObjectLostError) as err:
                raise WorkerError(f"rollout worker {w} of {len(self.actors)} failed to {what}: "
                                  f"{type(err).__name__}: {err}") from err
        return out

    def close(self) -> None:
        """Kill the workers (and the local Ray instance this engine started)."""
        for a in getattr(self, "actors", []):
            self.ray.kill(a)
        self.actors, self.pending, self._loads = [], None, []
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()


def _key(prompts: Sequence[str], n: int, sampling: SamplingParams, seeds: Sequence[int] | None) -> tuple:
    return tuple(prompts), n, sampling, None if seeds is None else tuple(seeds)
