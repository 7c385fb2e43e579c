"""The layering of the package, enforced: imports only go down; among the trainer-side modules
(layer LOOP, the loop's machinery: the package reasonrl.loop) only the imports listed in TRAINER_SIDE; no import
cycle anywhere, inside a package or across packages (lazy imports in a function count); rewards need no torch;
nothing imports the CLI; the trainer side never imports the named recipes."""

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "reasonrl"

# package or module (relative to reasonrl) -> layer, whole numbers from 0 (nothing below) up
LAYERS = {
    "config": 0,  # the package's __init__ (a docstring); its modules have their own rows
    # the loop (reasonrl.loop): run, trainer (+ update), batch (+ batch_score), stepdata, runtime, schedule, checkpoint,
    # warmstart, sft, rm_train (Bradley-Terry reward-model training), tracking, plots; among themselves only
    # TRAINER_SIDE
    "loop": 12,
    "errors": 0,  # the user-error types: anything may raise them
    "seeds": 0,  # process-independent seeds
    "text": 0,  # plain-text helpers (template slots)
    "eval": 1,  # the package's __init__ only
    "rewards": 1,
    "advantages": 1,
    "losses": 1,
    "eval.metrics": 1,
    "eval.audit_sim": 1,
    "eval.audit_models": 5,
    "eval.audit_io": 11,
    "eval.audit": 12,  # contamination audit (spec 7)
    "eval.majority": 2,  # maj@k answer grouping: rewards (math-verify) and stdlib only
    "eval.refine": 12,  # test-time generate -> verify -> refine (SU-01): an engine, a task, beside eval.runner
    "models.chat": 3,  # the prompt formatter, stop ids, context length: engines, tasks, data and parts render with it
    "models": 5,
    "tasks": 5,
    "rollout": 5,
    "distill": 5,
    "rollout.vllm_setup": 6,
    "rollout.vllm": 7,  # the vLLM engine (issue 43): starts from models (LoRA merge)
    # one step's data (Batch, Groups, Channel): rollouts and tasks' items, below the parts' contexts
    "rollout.batch": 6,
    "rollout.correction": 7,  # the trainer's old log-probs and TIS for an engine's rollouts (models.scoring)
    "rollout.vllm_checks": 10,  # what vLLM cannot serve, read from the parts' declared needs
    "tasks.protocols": 4,  # the task's optional abilities (typing Protocols): errors only; rollouts and data ask them
    "envs": 4,  # environments of multi-turn episodes (reset/step), the CodeAct harness, the FHIR store: tasks make them
    "tasks.env_check": 6,  # EvoEnv novelty: the audit's shingles and embedding checks (eval.audit_models)
    "distill.teacher": 7,  # the external teacher handle: loads models (models.loading), scores with distill.context
    "distill.teacher_outputs": 7,  # users' teacher outputs (JSONL): reads rows with tasks.files
    "data": 5,  # selectors, curricula, dataset builders: per-prompt state keyed by the item key
    "data.draft_files": 6,
    "data.draft_task": 7,
    "data.drafter": 8,  # drafts: loader, task wrapper, drafter (read tasks)
    "data.sft_rows": 6,  # supervised rows of tasks' items (reasonrl sft, VPD's warm start)
    "prompting": 7,  # prompt-policy RL: buffer, workers (models, rollout), the prompter's task (tasks)
    "population": 1,  # PopuLoRA's operators, ratings and PBT plan: numpy and openskill only
    "data.preferences": 8,  # preference pairs: a scripted judge's, sampled with rollout engines (reads tasks)
    "parts": 9,  # recipe parts name and configure implementations from L1-L2 (rollout strategies, teachers)
    "config.train": 11,
    "recipes": 11,
    "config.sections": 2,  # the run config's nested sections (rules only)
    "eval.runner": 12,
    "dist": 12,  # the loop's machinery outside reasonrl.loop (its modules: "loop" above)
    "diagnostics": 12,  # analyses of finished runs (unlearnability): read runs and models, train nothing
    "config.rules": 1,  # the config-value rule builders (validate and its per-method tables)
    "config.run_checks": 11,  # the checks across keys (sandbox level, parts' needs, FSDP, Ray): parts, tasks, rewards
    "config.validate": 12,  # reads the config, the parts' name tables and builds the task: above config and tasks
    "docs_tables": 13,  # the docs' generated tables: reads the recipes and parts, nothing imports it
    "api": 13,  # reasonrl.train (issue 46): Python objects in, a run through loop.run out
    "compare_plot": 1,  # compare's figure (matplotlib only); compare re-exports it
    "compare": 13,
    "commands": 15,
    "cli": 16,
    "__main__": 17,  # python -m reasonrl: the command itself
    "report": 14,  # reasonrl report: above compare (it reuses its plot and config_diff), below the commands
}

LOOP = LAYERS["loop"]  # the loop's machinery (reasonrl.loop, eval.runner, dist, diagnostics)


# a module of layer LOOP -> the other modules of that layer it may import (the loop's machinery, top to bottom)
TRAINER_SIDE = {
    "loop.run": {
        "loop.checkpoint",
        "dist",
        "eval.runner",
        "loop.plots",
        "loop.stepdata",
        "loop.tracking",
        "loop.trainer",
        "config.validate",
    },
    "loop.trainer": {
        "loop.batch",
        "loop.stepdata",
        "loop.checkpoint",
        "dist",
        "eval.runner",
        "loop.schedule",
        "loop.update",
    },
    "loop.update": {"loop.schedule", "loop.stepdata"},  # Trainer's update half (losses, optimiser steps): a mixin
    "loop.batch": {"loop.batch_score", "loop.runtime", "loop.stepdata"},
    "loop.batch_score": {"loop.stepdata"},  # BatchMaker's scoring half (rewards, advantages, selector): a mixin
    "loop.sft": {"eval.runner", "loop.schedule"},
    "loop.rm_train": {"loop.checkpoint", "loop.schedule"},
    "diagnostics": {"loop.checkpoint", "eval.runner"},
    "eval.runner": {"loop.checkpoint"},
    "config.validate": {"loop.tracking"},  # the tracking sinks' names and packages, checked before loading (issue 46)
    "dist": {"loop.checkpoint"},  # the strategies load checkpoints (FSDP's shards from the whole state)
}


def layer_of(dotted: str) -> tuple[str, int]:
    for name in sorted(LAYERS, key=len, reverse=True):
        if dotted == name or dotted.startswith(name + "."):
            if name == "loop" and dotted != name:  # the loop's modules are TRAINER_SIDE's units: loop.trainer, ...
                return ".".join(dotted.split(".")[:2]), LAYERS[name]
            return name, LAYERS[name]
    raise KeyError(f"module reasonrl.{dotted} has no layer in tests/test_layering.py: add it")


def imports_of(path: Path) -> list[str]:
    """Absolute reasonrl-relative names this module imports (relative imports resolved)."""
    rel = path.relative_to(SRC).with_suffix("")
    pkg = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
                names = [mod] if node.module else [".".join(base + [a.name]) for a in node.names]
                out += names
            elif node.module and node.module.startswith("reasonrl."):
                out.append(node.module[len("reasonrl.") :])
        elif isinstance(node, ast.Import):
            out += [a.name[len("reasonrl.") :] for a in node.names if a.name.startswith("reasonrl.")]
    return [o for o in out if o]


MODULES = sorted(p for p in SRC.rglob("*.py") if p.name != "__init__.py" or p.parent != SRC)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_go_down(path):
    me, mine = layer_of(module_name(path))
    for target in imports_of(path):
        name, theirs = layer_of(target)
        if name == me:
            continue
        if theirs == mine == LOOP:
            assert name in TRAINER_SIDE.get(me, ()), (
                f"{path.relative_to(SRC)} imports {target}: trainer-side module {me!r} may import only "
                f"{sorted(TRAINER_SIDE.get(me, ())) or 'no other trainer-side module'} (TRAINER_SIDE)"
            )
            continue
        assert theirs < mine, f"{path.relative_to(SRC)} (layer {mine}) imports {target} (layer {theirs})"
        assert not (mine == LOOP and name == "recipes"), (
            f"{path.relative_to(SRC)}: the trainer side must not import recipes"
        )


def import_graph() -> dict[str, set[str]]:
    """module -> the modules it imports (an imported symbol of a package resolves to the package)."""
    mods = {module_name(p): p for p in MODULES}

    def resolve(target: str) -> str:
        while target and target not in mods:
            target = target.rpartition(".")[0]
        return target

    return {m: {resolve(t) for t in imports_of(p)} - {"", m} for m, p in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None (depth-first search, colours: 1 on the path, 2 done)."""
    colour: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        colour[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if colour.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if not colour.get(nxt):
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        colour[node] = 2
        return None

    for start in sorted(graph):
        if not colour.get(start):
            found = visit(start, [start])
            if found:
                return found
    return None


def test_no_import_cycle_anywhere():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle_inside_a_package():
    # rewards.physics -> rewards.physics_dense -> rewards.physics (a lazy import once made this one)
    graph = {
        "rewards.physics": {"rewards.physics_dense"},
        "rewards.physics_dense": {"rewards.physics", "rewards.latex"},
        "rewards.latex": set(),
    }
    assert find_cycle(graph) == ["rewards.physics", "rewards.physics_dense", "rewards.physics"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_rewards_do_not_import_torch():
    for path in (SRC / "rewards").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        mods += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(m == "torch" or m.startswith("torch.") for m in mods), path
