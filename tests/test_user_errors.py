"""A user error is one clear message, not a traceback.

The table runs each bad input through the real command line (``python -m reasonrl.cli`` in a
fresh process) and checks: exit status 2, a short message on stderr naming the bad key or value,
no Python exception name, and nothing written (the check comes before any run starts). Then every
range rule of :mod:`reasonrl.config.validate` directly (its valid boundary passes, one step past fails),
and the other side: a bug keeps its traceback, and ``--debug`` / ``REASONRL_DEBUG`` show one.
"""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from reasonrl import cli
from reasonrl.config.train import DataOpts, Lora, TrainConfig, apply_overrides, split_config
from reasonrl.data.lze import LZE
from reasonrl.errors import MissingPathError, UserError
from reasonrl.parts import (
    AZR,
    EGRSD,
    FEST,
    SSOPD,
    VPD,
    BeamSampling,
    Correction,
    Critic,
    D2Evo,
    Diffusion,
    Drafts,
    Episodes,
    EvoEnv,
    GroupFilter,
    HintSampling,
    PopuLoRA,
    PromptPolicy,
    Redirect,
    RefineReplay,
    Sampling,
    Stages,
    Steering,
    TrajectoryBalance,
    Veto,
)
from reasonrl.recipes import get_recipe
from reasonrl.parts.teacher import KDRL, RKLOPD, TGPO, Teacher
from reasonrl.advantages import group_relative
from reasonrl.config.validate import RULES, check_run, problems, range_problems

ROOT = Path(__file__).resolve().parents[1]
PY_EXCEPTION = re.compile(r"Traceback|\b[A-Z]\w*(Error|Exception)\b")  # ValueError, KeyError, UnboundLocalError, ...

# [REAL,] id, argv ({d} is the folder of `data_dir`'s files), words the message must contain. Every case runs
# in-process through `main` (what the entry point calls); the REAL ones also through `python -m reasonrl.cli`.
REAL = "real"
CASES = [
    (REAL, "group_size=0", ["train", "group_size=0"], ["'group_size' = 0", ">= 2"]),
    ("group_size=1 rloo", ["train", "--recipe", "rloo", "group_size=1"], ["'group_size' = 1", "'rloo'"]),
    (REAL, "prompts_per_step=0", ["train", "prompts_per_step=0"], ["'prompts_per_step' = 0", ">= 1"]),
    (REAL, "prompts_per_step=-1", ["train", "prompts_per_step=-1"], ["'prompts_per_step' = -1", ">= 1"]),
    (REAL, "steps=-3", ["train", "--steps", "-3"], ["'steps' = -3", ">= 0"]),
    (REAL, "kl.coef=nan", ["train", "kl.coef=nan"], ["'kl.coef'", "finite", "nan"]),
    (REAL, "optim.lr=-1", ["train", "optim.lr=-1"], ["'optim.lr' = -1.0", "> 0"]),
    (REAL, "optim.lr=fast", ["train", "optim.lr=fast"], ["'optim.lr' must be a number", "'fast'"]),
    (REAL, "sampling.top_p=1.5", ["train", "sampling.top_p=1.5"], ["'sampling.top_p' = 1.5", "(0, 1]"]),
    ("stages.count=0", ["train", "stages.count=0"], ["'stages.count' = 0", ">= 1"]),
    (
        "wrong types",
        ["train", "mask_truncated=maybe", "steps=1.5"],
        ["'mask_truncated' must be true or false", "'steps' must be an integer"],
    ),
    (REAL, "key typo", ["train", "optim.lrr=1e-5"], ["'optim.lrr'", "did you mean 'optim.lr'"]),
    ("bad value syntax", ["train", "optim.lr=[1,"], ["'[1,'"]),
    # issue 46: the tracking sinks are checked with the other keys, before any model loads
    (REAL, "tracking typo", ["train", "tracking=wandbb"], ["'tracking'", "'wandbb'", "did you mean 'wandb'"]),
    ("tracking list typo", ["train", "tracking=[jsonl,tensorbord]"], ["'tensorbord'", "did you mean 'tensorboard'"]),
    (REAL, "unknown recipe", ["train", "--recipe", "grpoo"], ["'grpoo'", "did you mean 'grpo'"]),
    (REAL, "unknown model dir", ["train", "--model", "{d}/nope"], ["nope", "neither a local directory nor a hub id"]),
    (REAL, "not a model dir", ["train", "--model", "{d}/emptydir"], ["emptydir", "no config.json"]),
    (REAL, "unknown rg dataset", ["train", "--task", "rg:chain_summ"], ["'chain_summ'", "did you mean 'rg:chain_sum'"]),
    (
        "rg option rejected",
        ["train", "--task", "rg:chain_sum", "task_options.max_terms=0"],
        ["rg:chain_sum", "max_terms"],
    ),
    (
        REAL,
        "resume empty folder",
        ["train", "--resume", "--out", "{d}/emptydir"],
        ["--resume", "emptydir", "no config.yaml"],
    ),
    ("resume without out", ["train", "--resume"], ["--resume needs --out"]),
    (REAL, "malformed jsonl", ["train", "--task", "{d}/bad.jsonl"], ["bad.jsonl:2", "not valid JSON"]),
    (REAL, "empty jsonl", ["train", "--task", "{d}/empty.jsonl"], ["empty.jsonl", "no rows"]),
    (REAL, "binary jsonl", ["train", "--task", "{d}/binary.jsonl"], ["binary.jsonl", "not a UTF-8 text file"]),
    (
        REAL,
        "missing column",
        ["train", "--task", "{d}/nocol.jsonl"],
        ["nocol.jsonl row 0", "missing column(s) ['answer']"],
    ),
    (REAL, "null answer", ["train", "--task", "{d}/null.jsonl"], ["null.jsonl row 1", "'answer' is null"]),
    ("missing task file", ["train", "--task", "{d}/absent.jsonl"], ["absent.jsonl", "does not exist"]),
    (REAL, "yaml not a mapping", ["train", "{d}/list.yaml"], ["list.yaml", "must be a mapping"]),
    (REAL, "yaml malformed", ["train", "{d}/broken.yaml"], ["broken.yaml:3", "not valid YAML"]),
    ("yaml missing", ["train", "{d}/absent.yaml"], ["absent.yaml", "does not exist"]),
    (REAL, "bad task option key", ["eval", "--task-opt", "digits=2"], ["'digits'", "max_digits"]),
    ("task option not key=value", ["eval", "--task-opt", "digits"], ["expected key=value", "'digits'"]),
    ("eval option range", ["eval", "--problems", "0"], ["'--problems' = 0", ">= 1"]),
    (
        "episodic task without episodes",
        ["train", "--recipe", "grpo", "--task", "fhir", "task_options.n_patients=4"],
        ["task 'fhir'", "recipe 'grpo' has no episodes part", "episodes.max_turns=4"],
    ),
    (
        "compare episodic task",
        ["compare", "--recipes", "codeact,grpo", "--seeds", "1", "--task", "fhir"],
        ["recipe 'grpo' has no episodes part"],
    ),
    (
        "compare unknown recipe",
        ["compare", "--recipes", "grpo,dapoo", "--seeds", "1"],
        ["'dapoo'", "did you mean 'dapo'"],
    ),
    ("compare bad variant value", ["compare", "--recipes", "grpo:kl.coef=-1", "--seeds", "1"], ["'kl.coef' = -1.0"]),
    (
        "audit malformed eval row",
        ["audit", "--train", "{d}/nocol.jsonl", "--eval", "{d}/bad.jsonl", "--stages", "jaccard"],
        ["bad.jsonl:2", "not valid JSON"],
    ),
    (
        "audit unknown stage",
        ["audit", "--train", "{d}/nocol.jsonl", "--eval", "{d}/nocol.jsonl", "--stages", "ngram"],
        ["'ngram'", "jaccard, embed, judge"],
    ),
]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "bad.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n{bad json\n')
    (d / "empty.jsonl").write_text("")
    (d / "binary.jsonl").write_bytes(bytes([0x89, 0x50, 0x4E, 0x47, 0xFF, 0xFE, 0x00, 0x01]) * 16)
    (d / "nocol.jsonl").write_text('{"prompt": "1+1"}\n')
    (d / "null.jsonl").write_text('{"prompt": "1+1", "answer": "2"}\n{"prompt": "2+2", "answer": null}\n')
    (d / "list.yaml").write_text("- steps\n- 3\n")
    (d / "broken.yaml").write_text("optim:\n  lr: [1\n")
    (d / "emptydir").mkdir()
    return d


def run_cli(*args, cwd, env_extra=None, code=None):
    env = {k: v for k, v in os.environ.items() if k != "REASONRL_DEBUG"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    env.update(env_extra or {})
    cmd = [sys.executable, "-c", code] if code else [sys.executable, "-m", "reasonrl.cli"]
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def _case(row, slow: bool = False):
    return pytest.param(*row[-2:], id=row[-3], marks=pytest.mark.slow if slow else ())


def check_message(code, stdout: str, stderr: str, needles, folder: Path) -> None:
    output = stdout + stderr
    assert code == 2, output
    assert stderr.startswith("error: ") and len(output.strip().splitlines()) <= 6, output
    assert not PY_EXCEPTION.search(output), output
    for needle in needles:
        assert needle in stderr, output
    assert list(folder.iterdir()) == []  # refused before any run folder or file was written


# a new process per case (~5 s each to import the stack): two in the default tier, every case in the slow one
@pytest.mark.parametrize(
    "argv,needles", [_case(c, slow=i >= 2) for i, c in enumerate(c for c in CASES if c[0] == REAL)]
)
def test_a_user_error_is_one_short_message_on_the_command_line(argv, needles, data_dir, tmp_path):
    proc = run_cli(*[a.format(d=data_dir) for a in argv], cwd=tmp_path)
    check_message(proc.returncode, proc.stdout, proc.stderr, needles, tmp_path)


@pytest.mark.parametrize("argv,needles", [_case(c) for c in CASES])
def test_a_user_error_is_one_short_message_from_main(argv, needles, data_dir, tmp_path, monkeypatch, capfd):
    monkeypatch.delenv("REASONRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main([a.format(d=data_dir) for a in argv])
    out, err = capfd.readouterr()
    check_message(exit_.value.code, out, err, needles, tmp_path)


def test_a_bug_keeps_its_traceback(tmp_path):
    code = (
        "import sys, reasonrl.recipes as r\n"
        "def boom(name): raise RuntimeError('boom in get_recipe')\n"
        "r.get_recipe = boom\n"
        "from reasonrl.cli import main\n"
        "sys.argv = ['reasonrl'] + sys.argv[1:]\n"
        "main()\n"
    )
    proc = run_cli("train", cwd=tmp_path, code=code)
    assert proc.returncode == 1 and "RuntimeError: boom in get_recipe" in proc.stderr, proc.stderr
    assert "Traceback" in proc.stderr and len(proc.stderr.splitlines()) > 6


@pytest.mark.parametrize("how", ["--debug", pytest.param("REASONRL_DEBUG=1", marks=pytest.mark.slow)])
def test_debug_shows_the_traceback_of_a_user_error(how, tmp_path):
    args = ["--debug", "train", "group_size=0"] if how == "--debug" else ["train", "group_size=0"]
    proc = run_cli(*args, cwd=tmp_path, env_extra={"REASONRL_DEBUG": "1"} if how != "--debug" else None)
    assert proc.returncode == 1 and "Traceback" in proc.stderr and "UserError" in proc.stderr, proc.stderr
    assert "'group_size' = 0" in proc.stderr


def test_main_in_process(monkeypatch, capsys):
    monkeypatch.delenv("REASONRL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "steps=-3"])
    assert exit_.value.code == 2 and capsys.readouterr().err == (
        "error: config key 'steps' = -3 is out of range: must be >= 0 (0: evaluate only)\n"
    )
    with pytest.raises(UserError, match="'steps' = -3"):
        cli.main(["--debug", "train", "steps=-3"])
    monkeypatch.setattr("reasonrl.recipes.get_recipe", lambda name: (_ for _ in ()).throw(RuntimeError("bug")))
    with pytest.raises(RuntimeError, match="bug"):  # not turned into a one-line message
        cli.main(["train"])


def test_the_entry_point_is_main():
    text = (ROOT / "pyproject.toml").read_text()  # (tomllib is 3.11+; the package supports 3.10)
    assert re.search(r'^\[project\.scripts\]\nreasonrl = "reasonrl\.cli:main"$', text, re.M)


# ------------------------------------------------------------------ check_run, rule by rule


def with_value(key: str, value, recipe_name: str = "grpo", also: dict | None = None):
    """(run config, recipe) with one knob set, bypassing the parts' own checks (frozen dataclasses
    are set in place on fresh copies) so that check_run alone decides. ``also``: other knobs set with
    it (where its rule reads them: ``evoenv.judge`` is judged only with ``evoenv.review=judge``)."""
    cfg, recipe = TrainConfig(), get_recipe(recipe_name)
    values = {**(also or {}), key: value}
    optional = {
        "stages": Stages(),
        "group_filter": GroupFilter(),
        "beam": BeamSampling(),
        "selector": LZE(),
        "steering": Steering(positive=("a",), negative=("b",)),
        "hints": HintSampling(),
        "ssopd": SSOPD(),
        "egrsd": EGRSD(),
        "correction": Correction(),
        "redirect": Redirect(),
        "fest": FEST(),
        "vpd": VPD(),
        "refine_replay": RefineReplay(),
        "drafts": Drafts(),
        "d2evo": D2Evo(),
        "azr": AZR(),
        "evoenv": EvoEnv(),
        "populora": PopuLoRA(),
        "prompt_policy": PromptPolicy(),
        "critic": Critic(),
        "balance": TrajectoryBalance(),
        "diffusion": Diffusion(),
        "episodes": Episodes(),
    }
    # only the part the key names: two strategies (beam + steering) cannot share a recipe, and a part's
    # own rules (hints: n_hints x per_hint = group_size; redirect: n_r divides it) would judge other keys' values
    optional = {k: v for k, v in optional.items() if any(name.startswith(k + ".") for name in values)}
    if key.startswith(("teacher.", "tgpo.", "rkl_opd.", "kdrl.")):  # a teacher method needs the teacher part
        optional.update(
            teacher=Teacher(model="tiny:tiny"), **{k: v for k, v in TEACHER_PARTS.items() if key.startswith(k + ".")}
        )
    recipe = dataclasses.replace(recipe, **optional, loss=dataclasses.replace(recipe.loss, veto=Veto()))
    run_keys = {k for k in values if hasattr(cfg, k.split(".")[0])}
    for name in values.keys() - run_keys:  # the recipe's knobs first: what its parts need follows from them
        cfg, recipe = _set(cfg, recipe, name, values[name])  # (balance.log_z=table: a pool)
    cfg = with_needs(cfg, recipe)  # what the parts need of the run (a pool, adapters), so only `key` is judged
    for name in run_keys:  # then the run's, over those needs (lora.r=0 is the case, not the needs' 8)
        cfg, recipe = _set(cfg, recipe, name, values[name])
    return cfg, recipe


def _set(cfg: TrainConfig, recipe, key: str, value):
    head, *rest = key.split(".")
    if not rest:
        if hasattr(cfg, head):
            setattr(cfg, head, value)
            return cfg, recipe
        return cfg, dataclasses.replace(recipe, **{head: value})
    owner = cfg if hasattr(cfg, head) else recipe  # a nested run part (lora) or a recipe section
    part = dataclasses.replace(getattr(owner, head))
    target = part
    for name in rest[:-1]:
        child = dataclasses.replace(getattr(target, name))
        object.__setattr__(target, name, child)
        target = child
    object.__setattr__(target, rest[-1], value)
    if owner is cfg:
        return dataclasses.replace(cfg, **{head: part}), recipe
    return cfg, dataclasses.replace(recipe, **{head: part})


TEACHER_PARTS = {"tgpo": TGPO(), "rkl_opd": RKLOPD(), "kdrl": KDRL()}


def with_needs(cfg: TrainConfig, recipe) -> TrainConfig:
    """``cfg`` with the recipe's own run defaults (a finite pool for a selector, LoRA for adapter parts)."""
    pool = dict(recipe.run_defaults).get("data.pool", 16 if "pool" in recipe.needs else 0)
    rank = dict(recipe.run_defaults).get("lora.r", 8 if "lora" in recipe.needs else 0)
    return dataclasses.replace(cfg, data=DataOpts(pool=pool), lora=Lora(r=rank))


# key, a valid boundary value, the first invalid value past it
BOUNDARIES = [
    ("steps", 0, -1),
    ("prompts_per_step", 1, 0),
    ("micro_batch_size", 1, 0),
    ("max_rows", 1, 0),
    ("micro_batch_size", "auto", "automatic"),
    ("max_rows", "auto", "Auto"),
    ("seed", 0, -1),
    ("seed", 2**32 - 1, 2**32),
    ("eval_seed", 0, -1),
    ("eval_every", 0, -1),
    ("eval_problems", 1, 0),
    ("final_eval_problems", 0, -1),
    ("final_eval_k", 0, -1),
    ("final_eval_temperature", 0.01, 0.0),
    ("save_every", 0, -1),
    ("keep_last", 0, -1),
    ("max_nonfinite", 1, 0),
    ("dtype", "bfloat16", "float64"),
    # log_completions: 0 off, a fraction below 1, or a whole count of rows per step
    ("log_completions", 0, -1),
    ("log_completions", 0.999, 1.5),
    ("log_completions", 3, 3.25),
    ("group_size", 2, 1),
    ("advantage.estimator", "reinforce_pp", "ppo"),
    ("advantage.scale", "none", "std"),
    ("advantage.eps", 0.0, -1e-9),
    ("loss.ratio", "sequence-token", "seq"),
    ("loss.trust_region", "cispo", "ppo"),
    ("loss.agg", "token-mean", "mean"),
    ("loss.clip_low", 0.0, -0.01),
    ("loss.clip_high", 0.0, -0.01),
    ("loss.dual_clip", 1.001, 1.0),
    ("loss.norm_len", 1, 0),
    ("loss.veto.trigger", "ratio_low", "never"),
    ("loss.veto.clip_low", 0.0, -0.1),
    ("loss.veto.clip_high", 0.0, -0.1),
    ("kl.coef", 0.0, -1e-9),
    ("kl.estimator", "k1", "k4"),
    ("kl.ratio", 0.0, -0.1),
    ("kl.q_min", 0.0, -0.1),
    ("kl.q_max", 0.6, 0.59),  # the default q_min is 0.6
    ("kl.guide", "random", "sage"),
    ("kl.n_cycles", 1, 0),
    ("kl.decay", 1.0, 0.0),
    ("kl.decay", 1e-9, 1.01),
    ("kl.norm", "zscore", "max"),
    ("kl.source", "ref", "old"),
    ("prompt.format", "plain", "template"),
    ("prompt.max_tokens", 1, 0),
    ("prompt.overflow", "truncate_left", "cut"),
    ("sampling.temperature", 0.0, -0.1),
    ("sampling.top_p", 1.0, 1.01),
    ("sampling.top_p", 1e-9, 0.0),
    ("sampling.top_k", 0, -1),
    ("sampling.max_new_tokens", 1, 0),
    ("optim.lr", 1e-12, 0.0),
    ("optim.weight_decay", 0.0, -0.1),
    ("optim.beta1", 0.0, 1.0),
    ("optim.beta2", 0.999, 1.0),
    ("optim.warmup_steps", 0, -1),
    ("optim.schedule", "constant", "linear"),
    ("optim.min_lr_ratio", 0.0, -0.01),
    ("optim.min_lr_ratio", 1.0, 1.01),
    ("optim.max_grad_norm", 1e-6, 0.0),
    ("optim.mu", 1, 0),
    ("optim.minibatches", 1, 0),
    ("group_filter.max_rounds", 1, 0),
    ("group_filter.max_rounds_cap", 1, 0),
    ("stages.count", 1, 0),
    ("steering.alphas", "uniform", "random"),
    ("steering.anneal", "cosine", "exp"),
    ("steering.layer", 0, -1),
    ("steering.alpha_max", 0.0, -0.5),
    ("beam.first_frac", 1.0, 1.01),
    ("beam.first_frac", 0.01, 0.0),
    ("beam.k_max", 1, 0),
    ("hints.n_hints", 2, 0),  # 2: hints.per_hint 4 x 2 = group_size 8
    ("hints.per_hint", 4, 0),
    ("hints.per_hint", 4, 5),
    ("hints.p_drop", 1.0, 1.01),
    ("hints.p_drop", 0.0, -0.01),
    ("hints.sampler", "random", "shuffled"),
    ("hints.adv_lambda", 0.0, -0.1),
    ("hints.distill_coef", 0.0, -0.1),
    ("hints.template", "{hint}\n{prompt}", "{hint} only"),
    ("correction.p_max", 1.0, 1.01),
    ("correction.p_max", 1e-9, 0.0),
    ("correction.q0", 0.0, -0.01),
    ("correction.q0", 1.0, 1.01),
    ("correction.kappa", 0.0, -0.1),
    ("correction.weight", 1e-9, 0.0),
    ("correction.rho", 1.0, 1.01),  # (its lower bound is the rho_min rule's: rho_min 0.125 <= rho)
    ("correction.rho_min", 0.0, -0.01),
    ("correction.rho_min", 0.5, 0.51),  # up to the default rho 0.5
    ("correction.acc_floor", 1.0, 1.01),
    ("correction.factor", 1.0, 0.99),
    ("correction.template", "{attempt}{prompt}", "{attempt}=?\n"),
    ("refine_replay.refine_share", 0.0, -0.1),  # (its upper bound, with replay_share's, is the replay_share rule's)
    ("refine_replay.replay_share", 0.0, -0.1),
    ("refine_replay.replay_share", 0.79, 0.8),  # refine_share 0.2
    ("refine_replay.capacity", 1, 0),
    ("redirect.critic", "model", "verifier"),
    ("redirect.n_r", 1, 0),
    ("redirect.n_r", 8, 3),
    ("redirect.n_v", 1, 0),
    ("redirect.n_v", 4, 6),
    ("redirect.clip", 1e-9, 0.0),
    ("redirect.lambda_r", 0.0, -0.1),
    ("redirect.eta", 0.0, -0.1),
    ("redirect.max_redirects", 1, 0),
    ("redirect.template", "c: {critique}\n", "c: {crit}\n"),
    ("lora.r", 0, -1),
    ("lora.alpha", 1e-9, 0.0),
    ("lora.dropout", 0.0, -0.1),
    ("lora.dropout", 0.99, 1.0),
    ("dist.strategy", "ddp", "zero3"),
    ("dist.strategy", "fsdp", "FSDP"),
    ("dist.backend", "gloo", "mpi"),
    ("rollout.workers", 0, -1),
    ("rollout.check_every", 1, 0),
    ("rollout.compile", False, True),  # compile needs rollout.static_cache=true
    ("data.pool", 0, -1),
    ("sandbox.require", "rlimits", "strong"),
    ("ssopd.coef", 0.0, -0.1),
    ("ssopd.template", "{prompt}{solution}", "{prompt} only"),
    ("ssopd.template", "{solution}{prompt}", "{prompt}{solution}{x}"),
    ("ssopd.divergence", "jsd", "kl"),
    ("ssopd.beta", 1.0, 1.01),
    ("ssopd.top_k", 1, 0),
    ("ssopd.clip", 1e-9, 0.0),
    ("ssopd.frontier", "mixed", "4p"),
    ("ssopd.max_prefix_tokens", 1, 0),
    ("egrsd.template", "{solution}{prompt}", "{solution}"),
    ("egrsd.direction", "sign", "reward"),
    ("egrsd.magnitude", "ratio", "log"),
    ("egrsd.cap", 1.0, 0.99),
    ("egrsd.g_min", 1.0, 0.0),
    ("egrsd.g_min", 1e-9, 1.01),
    ("egrsd.tau", 1e-9, 0.0),
    ("egrsd.lookahead", 0, -1),
    ("egrsd.alpha", 0.0, -0.1),
    ("teacher.model", "tiny:tiny", "/no/such/teacher"),
    ("teacher.dtype", "float16", "float64"),
    ("teacher.chunk_rows", 1, 0),
    ("tgpo.variant", "adv", "both"),
    ("tgpo.coef", 0.0, -1e-9),
    ("tgpo.decay", 0.0, -1e-9),
    ("tgpo.min_coef", 0.0, -1e-9),
    ("rkl_opd.coef", 0.0, -0.1),
    ("kdrl.coef", 0.0, -0.1),
    ("kdrl.estimator", "k3", "k4"),
    ("fest.coef", 0.0, -0.1),
    ("fest.gamma", 1.0, 1.01),
    ("fest.gamma", 0.0, -0.01),
    ("fest.decay", "cosine", "step"),
    ("fest.decay_passes", 1, 0),
    ("fest.beta", 1e-9, 0.0),
    ("fest.sup_loss", "sft", "ipo"),
    ("fest.reference", "behaviour", "teacher"),
    ("fest.n_demos", 1, 0),
    ("fest.demos_per_step", 1, 0),
    ("fest.demos", None, "no/such/demos.jsonl"),
    ("fest.negatives", "all", "two"),
    ("fest.all_correct", "lowest_likelihood", "keep"),
    ("fest.temperature", 1e-9, 0.0),
    ("vpd.feedback", "verdict", "judge"),
    ("vpd.template", "{feedback}{attempt}{prompt}", "{attempt}{prompt}"),
    ("vpd.attempt", "first", "last"),
    ("vpd.beta", 0.05, 0.0),
    ("vpd.target_kl", 1e-9, 0.0),
    ("vpd.factor", 1.0, 0.99),
    ("vpd.band", 1.0, 0.99),
    ("vpd.beta_min", 1e-9, 0.0),
    ("vpd.beta_max", 1e-3, 9e-4),
    ("vpd.e_kl", "k3", "k2"),
    ("vpd.e_coef", 0.0, -0.1),
    ("vpd.clip", 1e-9, 0.0),
    ("vpd.m_divergence", "sampled", "jsd"),
    ("vpd.m_coef", 0.0, -0.1),
    ("vpd.alpha", 0.0, -0.1),
    ("drafts.mode", "no_draft", "wrong_drafts"),
    ("drafts.seed", 0, -1),
    ("drafts.max_prompt_tokens", 1, 0),
    ("drafts.template", "{draft}{problem}", "{problem}"),
    ("d2evo.iteration_steps", 1, 0),
    ("d2evo.estimate_samples", 1, 0),
    ("d2evo.solver_samples", 1, 0),
    ("d2evo.anchors_per_step", 1, 0),
    ("d2evo.ngram", 1, 0),
    ("d2evo.p_lo", 0.0, -0.01),
    ("d2evo.p_hi", 0.2, 0.19),  # not below the default p_lo 0.2
    ("d2evo.p_hi", 1.0, 1.01),
    ("d2evo.p_star", 1.0, 1.01),
    ("d2evo.eta", 0.0, -0.1),
    ("d2evo.floor", 1.0, 1.01),
    ("d2evo.weight", 0.0, -0.1),
    ("d2evo.parse", "line", "word"),
    ("d2evo.template", "{prompt}", "no slot"),
    ("group_filter.metric", "reward", "loss"),
    ("steering.positive", ("a",), ()),
    ("steering.negative", ("b",), ()),
    ("kl.schedule_upper", (0.3, 0.25), (0.3,)),
    ("kl.schedule_lower", (0.1, 0.1), (0.1, 0.1, 0.1)),
    ("refine_replay.template", "{attempt}{prompt}", "{prompt} only"),
    ("selector.selection_ratio", 1.0, 1.01),
    ("selector.selection_ratio", 1e-9, 0.0),
    ("selector.min_selection_ratio", 1.0, 0.0),
    ("selector.ema_decay", 0.0, 1.0),
    ("selector.d_min", 1.0, 1.01),
    ("selector.alpha", 0.0, -0.1),
    ("selector.jitter", 0.0, -0.1),
    ("selector.round_to", 0, -1),
    ("selector.warmup_transition_epochs", 0, -1),
    ("selector.prune_streak", 1, 0),
    ("selector.replay_frac", 1.0, 0.0),
    ("ssopd.w_star", "any", "all"),
    ("ssopd.teacher", "ema", "old"),
    ("ssopd.ema_decay", 1.0, 1.01),
    ("ssopd.ema_decay", 0.0, -0.01),
    ("vpd.warm_steps", 0, -1),
    ("vpd.warm_batch", 1, 0),
    ("vpd.warm_lr", 1e-12, 0.0),
    ("vpd.warm_wrong_rate", 1.0, 1.01),
    ("vpd.warm_wrong_rate", 0.0, -0.01),
    ("azr.proposals", 1, 0),
    ("azr.estimate_samples", 1, 0),
    ("azr.capacity", 1, 0),
    ("azr.min_inputs", 2, 1),
    ("azr.types", "induction", "induction,"),
    ("azr.types", "deduction,abduction", "deduction,abductions"),
    ("evoenv.proposals", 1, 0),
    ("evoenv.estimate_instances", 1, 0),
    ("evoenv.estimate_samples", 1, 0),
    ("evoenv.p_lo", 0.0, -0.01),  # (its upper bound is the p_hi rule's: p_lo <= p_hi)
    ("evoenv.p_hi", 0.1, 0.09),  # not below the default p_lo 0.1
    ("evoenv.p_hi", 1.0, 1.01),
    ("evoenv.reward", "band", "bands"),
    ("evoenv.paid", "calibrated", "all"),
    ("evoenv.review", "off", "none"),  # (review=judge: with a judge set, see DEPENDENT)
    ("evoenv.review_samples", 1, 0),
    ("evoenv.novelty_tau", 1.0, 1.01),
    ("evoenv.novelty_tau", 1e-9, 0.0),
    ("evoenv.embed_tau", 1.0, 1.01),
    ("evoenv.embed_tau", 1e-9, 0.0),
    ("evoenv.capacity", 1, 0),
    ("evoenv.ema", 1.0, 1.01),
    ("evoenv.ema", 1e-9, 0.0),
    ("evoenv.patience", 1, 0),
    ("populora.teachers", 1, 0),
    ("populora.students", 1, 0),
    ("populora.proposals", 1, 0),
    ("populora.estimate_samples", 1, 0),
    ("populora.capacity", 1, 0),
    ("populora.min_inputs", 2, 1),
    ("populora.pfsp", "uniform", "random"),
    ("populora.pbt_every", 0, -1),
    ("populora.pbt_frac", 0.0, -0.01),
    ("populora.pbt_frac", 1.0, 1.01),
    ("populora.mutation_sigma", 0.0, -0.1),
    ("populora.interp", 0.0, -0.01),
    ("populora.interp", 1.0, 1.01),
    ("populora.offspring_sigma", 1e-9, 0.0),
    ("populora.sigma0", 1e-9, 0.0),
    ("populora.beta", 1e-9, 0.0),
    ("populora.tau", 0.0, -1e-9),
    ("populora.types", "induction", "induction,"),
    ("populora.operators", "gaussian,svd", "gaussian,svds"),
    ("populora.pbt_buffers", "keep", "loser"),
    ("prompt_policy.instances", 1, 0),
    ("prompt_policy.max_fragments", 1, 0),
    ("prompt_policy.k_top", 0, -1),
    ("prompt_policy.k_bottom", 0, -1),
    ("prompt_policy.capacity", 1, 0),
    ("prompt_policy.distill_coef", 0.0, -0.1),
    ("prompt_policy.pool", 1, 0),
    ("prompt_policy.renderer", "text", "texts"),
    ("prompt_policy.critic", "none", "failure"),
    ("prompt_policy.contexts", "meta:f", "meta:"),
    ("prompt_policy.contexts", "task", "tasks"),
    ("prompt_policy.template", "{prompt}{instance}", "{prompt}"),
    ("prompt_policy.target", "first_max", "max"),
    # the run's calls: steps 180 x prompts_per_step 8 x group_size 8 x instances 4 (the defaults)
    ("prompt_policy.max_worker_calls", 46080, 46079),
    ("prompt_policy.max_worker_calls", 0, -1),
    ("critic.model", "head", "heads"),
    ("critic.model", "policy", str(ROOT / "src")),  # a folder without config.json
    ("critic.lr", 1e-12, 0.0),
    ("critic.gamma", 0.0, -0.01),
    ("critic.gamma", 1.0, 1.01),
    ("critic.lam", 0.0, -0.01),
    ("critic.lam", 1.0, 1.01),
    ("critic.value_clip", 1e-9, 0.0),
    ("critic.vf_coef", 1e-9, 0.0),
    ("critic.warmup_steps", 1, -1),  # > 0 with the default optim.weight_decay 0 (nonzero: see DEPENDENT)
    ("critic.weight_decay", 0.0, -0.1),
    ("critic.max_grad_norm", 1e-6, 0.0),
    ("balance.beta", 1e-9, 0.0),
    ("balance.reward", "raw", "rewards"),
    ("balance.weight", "one", "two"),
    ("balance.clip_low", 0.0, -0.01),
    ("balance.clip_low", 0.99, 1.0),
    ("balance.clip_high", 0.0, -0.01),
    ("balance.cap", 1e-9, 0.0),
    ("balance.log_z", "table", "tables"),
    ("balance.z_lr", 1e-12, 0.0),
    ("balance.z_layers", 1, 0),
    ("balance.z_dropout", 0.0, -0.01),
    ("balance.z_dropout", 0.99, 1.0),
    ("balance.proposals", 1, 0),
    ("balance.missing", "skip", "skipped"),
    ("balance.table", None, str(ROOT / "pyproject.toml")),  # log_z=head reads no table: a file is refused
    ("balance.surrogate", "elbo", "ELBO"),  # elbo with the default log_z=head (table: see DEPENDENT)
    ("balance.mc", 1, 0),
    ("balance.mask_t", 1.0, 1.01),
    ("balance.mask_t", 1e-9, 0.0),
    ("balance.t_min", 1.0, 1.01),
    ("balance.t_min", 1e-9, 0.0),
    ("diffusion.steps", 1, 0),
    ("diffusion.block_length", 1, 0),
    ("diffusion.remasking", "random", "randomly"),
    # multi-turn episodes: counts from 1 (a context of at least 2 tokens), templates holding their slot once
    ("episodes.max_turns", 1, 0),
    ("episodes.max_obs_tokens", 1, 0),
    ("episodes.max_context_tokens", 2, 1),
    ("episodes.max_turn_tokens", 1, 0),
    ("episodes.workers", 1, 0),
    ("episodes.max_live", 1, 0),
    ("episodes.max_live", 64, 65),
    ("episodes.observation_template", "{observation}", "{observation}{observation}"),
    ("episodes.answer_format", "A:{answer}", "A:"),
    # the vLLM engine's keys (issue 43); engine=vllm itself is judged by vllm_problems (tests/test_vllm_checks.py)
    ("rollout.engine", "hf", "vLLM"),
    ("rollout.sync_every", 1, 0),
    ("rollout.is_correction", "none", "is"),
    ("rollout.is_cap", 1.0, 0.99),
    ("rollout.vllm.dtype", "float16", "fp16"),
    ("rollout.vllm.kv_cache_gib", 1e-3, 0.0),
    ("rollout.vllm.threads", 1, 0),
    ("rollout.vllm.gpu_memory_utilization", 1.0, 1.01),
    ("rollout.vllm.gpu_memory_utilization", 1e-9, 0.0),
    ("rollout.vllm.max_model_len", 2, 1),
]

# rules that read another knob, judged with it set (key, good, bad, the other knobs): the bad value passes
# with that knob's default, so these cases are the only ones that can refuse it
DEPENDENT = [
    ("evoenv.judge", "judge.py:verdict", "judge.py", {"evoenv.review": "judge"}),  # judged only with review=judge
    ("evoenv.judge", "judge.py:verdict", "", {"evoenv.review": "judge"}),  # the default: no judge named
    ("balance.surrogate", "token", "elbo", {"balance.log_z": "table"}),  # elbo needs log_z=head
    ("critic.warmup_steps", 0, 1, {"optim.weight_decay": 0.01}),  # decay would move the waiting actor
]


@pytest.mark.parametrize("key,good,bad", BOUNDARIES, ids=[f"{k}={b!r}" for k, _, b in BOUNDARIES])
def test_each_rule_passes_its_boundary_and_refuses_past_it(key, good, bad):
    check_run(*with_value(key, good))
    with pytest.raises(UserError) as err:
        check_run(*with_value(key, bad))
    assert str(err.value) == str(err.value).splitlines()[0] and f"'{key}' = {bad!r}" in str(err.value)


@pytest.mark.parametrize("key,good,bad,also", DEPENDENT, ids=[f"{k}={b!r} with {a}" for k, _, b, a in DEPENDENT])
def test_a_rule_that_reads_another_knob_refuses_past_its_boundary_with_it_set(key, good, bad, also):
    check_run(*with_value(key, good, also=also))
    with pytest.raises(UserError) as err:
        check_run(*with_value(key, bad, also=also))
    assert str(err.value) == str(err.value).splitlines()[0] and f"'{key}' = {bad!r}" in str(err.value)
    if key != "evoenv.judge":  # (judge's boundary exists only with review=judge: it has no BOUNDARIES case)
        check_run(*with_value(key, bad))  # the same value passes with the other knob's default


def test_every_rule_has_a_boundary_test():
    untested = set(RULES) - {k for k, _, _ in BOUNDARIES} - {k for k, *_ in DEPENDENT}
    assert untested == {"device", "sampling.min_p", "prompt.system_prompt"}  # all tested below


def test_a_system_prompt_needs_the_chat_template():
    cfg, recipe = with_value("prompt.system_prompt", "Be brief.")  # prompt.format=auto: allowed
    check_run(cfg, recipe)
    cfg = dataclasses.replace(cfg, prompt=dataclasses.replace(cfg.prompt, format="plain"))
    with pytest.raises(
        UserError,
        match=r"'prompt.system_prompt' = 'Be brief.' is out of range: must be unset with "
        r"prompt.format=plain",
    ):
        check_run(cfg, recipe)


def test_device_rule_and_the_guarded_min_p_rule():
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="'device' = 'cuda:0'.*no CUDA device"):
            check_run(*with_value("device", "cuda:0"))
    check_run(*with_value("device", "cpu"))
    # sampling.min_p: applies only where Sampling has the field (another engineer adds it)
    assert range_problems({"sampling.min_p": 0.0}, RULES, "k") == []
    assert "must be in [0, 1)" in range_problems({"sampling.min_p": 1.0}, RULES, "k")[0]
    assert range_problems({}, RULES, "k") == []  # absent field: the rule is skipped
    if any(f.name == "min_p" for f in dataclasses.fields(Sampling)):
        with pytest.raises(UserError, match="sampling.min_p"):
            check_run(*with_value("sampling.min_p", 1.0))


def test_group_size_floor_follows_the_estimator():
    # a one-sample group has advantage 0 (or is refused) for every group-relative estimator
    assert [e for e in ("grpo", "dr_grpo", "rloo", "reinforce_pp_baseline", "reinforce_pp") if group_relative(e)] == [
        "grpo",
        "dr_grpo",
        "rloo",
        "reinforce_pp_baseline",
    ]
    check_run(TrainConfig(), dataclasses.replace(get_recipe("reinforce_pp"), group_size=1))
    with pytest.raises(UserError, match=r"'group_size' = 0 .* >= 1$"):
        check_run(TrainConfig(), dataclasses.replace(get_recipe("reinforce_pp"), group_size=0))


RM_UNSET = (
    "config key 'rewards.rm.model' is not set: give a reward model directory (train one with `reasonrl rm "
    "train --pairs PAIRS.jsonl --out DIR`, docs/ppo.md)"
)
JUDGE_UNSET = (
    "config key 'rewards.judge.backend' is not set: give path/to/judge.py:function, http(s)://host/v1 "
    "(an OpenAI-compatible server) or hf:DIR (docs/agents.md)"
)


def test_every_shipped_recipe_passes_with_the_default_run_config_and_its_own_run_defaults():
    from reasonrl.commands.common import train_config
    from reasonrl.recipes import RECIPES

    for name, r in RECIPES.items():  # what `reasonrl train --recipe NAME` alone builds
        cfg, _ = train_config([], name, None, None, None, None, False)
        # GRLO's reward model and codeact_judge's judge are prepared inputs: the one line names what to give
        assert problems(cfg, r) == {"grlo": [RM_UNSET], "codeact_judge": [JUDGE_UNSET]}.get(name, []), name
    # without them, a part's needs are named before anything loads
    assert problems(TrainConfig(), get_recipe("lze")) == [
        "recipe 'lze': its part 'selector' keeps per-prompt state across epochs, so it needs prompts that recur: set "
        "data.pool=N (the first N distinct train problems of the task)"
    ]
    assert problems(TrainConfig(), get_recipe("vpd")) == [
        "recipe part 'vpd' needs LoRA (its modules are adapters on one backbone): set lora.r > 0 (e.g. lora.r=8)"
    ]


def test_every_float_must_be_finite_even_in_fields_added_later():
    @dataclasses.dataclass(frozen=True)
    class NewSampling(Sampling):
        new_knob: float = 0.5

    recipe = dataclasses.replace(get_recipe("grpo"), sampling=NewSampling(new_knob=float("inf")))
    with pytest.raises(UserError, match=r"'sampling.new_knob' must be a finite number, got inf"):
        check_run(TrainConfig(), recipe)
    cfg = TrainConfig(task_options={"test_fraction": float("nan")})
    with pytest.raises(UserError, match=r"'task_options.test_fraction' must be a finite number"):
        check_run(cfg, get_recipe("grpo"))
    tempo = apply_overrides(get_recipe("tempo"), split_config({"rewards": {"tempo": {"weight": "nan"}}})[1])
    with pytest.raises(UserError, match=r"'rewards.tempo.weight' must be a finite number"):
        check_run(TrainConfig(), tempo)


def test_types_are_checked_and_all_problems_listed_at_once():
    cfg = TrainConfig(steps=2.5, prompts_per_step=True, device=3)
    recipe = dataclasses.replace(get_recipe("grpo"), group_size=0)
    lines = str(pytest.raises(UserError, check_run, cfg, recipe).value).splitlines()
    assert lines == [
        "config key 'steps' must be an integer, got 2.5",
        "config key 'prompts_per_step' must be an integer, got True",
        "config key 'device' must be text, got 3",
        "config key 'group_size' = 0 is out of range: must be >= 2 (estimator 'grpo' compares the "
        "samples of a prompt; a group of 1 learns nothing)",
    ]


def test_a_bad_part_value_is_named_by_the_parts_own_rule():
    # a part holds any value (it is data); the rule its class declares names the key before anything loads
    recipe = apply_overrides(get_recipe("grpo"), {"stages": {"count": 0}, "kl": {"guide": "sage"}})
    with pytest.raises(UserError) as err:
        check_run(TrainConfig(), recipe)
    assert str(err.value).splitlines() == [
        "config key 'kl.guide' = 'sage' is out of range: must be one of branch, random, token with kl.estimator=k3 "
        "(SAGE's anchor is defined with k3)",
        "config key 'stages.count' = 0 is out of range: must be >= 1",
    ]


def test_path_errors_are_still_the_os_errors_they_were():
    assert issubclass(MissingPathError, FileNotFoundError) and issubclass(MissingPathError, ValueError)
    from reasonrl.tasks import get_task

    with pytest.raises(FileNotFoundError, match="does not exist"):
        get_task("/nonexistent/rows.jsonl")


def test_a_disa_table_is_a_file_that_exists_and_only_with_log_z_table(tmp_path):
    from reasonrl.data.partition import write_table

    table = {"balance.log_z": "table"}
    # the header must match the run (balance's beta 15 and token means, grpo's sampling at T = 0.8; issue 41)
    ok = write_table(tmp_path / "z.jsonl", {"beta": 15.0, "length_norm": True, "temperature": 0.8}, [])
    check_run(*with_value("balance.table", str(ok), also=table))
    with pytest.raises(
        UserError, match=r"'balance.table' = '.*no-such-table.jsonl' is out of range: must be a table file"
    ):
        check_run(*with_value("balance.table", str(ROOT / "no-such-table.jsonl"), also=table))
    with pytest.raises(UserError, match=r"'balance.table' = '.*pyproject.toml' is out of range: must be a table file"):
        check_run(*with_value("balance.table", str(ROOT / "pyproject.toml"), also=table))  # not a DISA table
    with pytest.raises(UserError, match=r"must be null: log_z=head reads no table"):
        check_run(*with_value("balance.table", str(ok)))
