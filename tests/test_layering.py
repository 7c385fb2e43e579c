"""The layering of the package, enforced: imports only go down; among the trainer-side modules
(layer 4, the loop's machinery) only the imports listed in TRAINER_SIDE; no import cycle anywhere,
inside a package or across packages (lazy imports in a function count); rewards need no torch;
nothing imports the CLI; the trainer side never imports the named recipes."""
import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "reasonrl"

# package or module (relative to reasonrl) -> layer
LAYERS = {
    "errors": 0,  # the user-error types: anything may raise them
    "seeds": 0,  # process-independent seeds
    "text": 0,  # plain-text helpers (template slots)
    "eval": 1,  # the package's __init__ only
    "rewards": 1, "advantages": 1, "losses": 1, "eval.metrics": 1,
    "eval.audit_sim": 1, "eval.audit_models": 2, "eval.audit_io": 3, "eval.audit": 4,  # contamination audit (spec 7)
    "eval.majority": 1.5,  # maj@k answer grouping: rewards (math-verify) and stdlib only
    "eval.refine": 4,  # test-time generate -> verify -> refine (SU-01): an engine, a task, beside eval.runner
    "models.chat": 1.9,  # the prompt formatter, stop ids, context length: engines, tasks, data and parts render with it
    "models": 2, "tasks": 2, "rollout": 2, "distill": 2,
    "rollout.vllm_setup": 2.1, "rollout.vllm": 2.2,  # the vLLM engine (issue 43): starts from models (LoRA merge)
    "rollout.correction": 2.2,  # the trainer's old log-probs and TIS for an engine's rollouts (models.scoring)
    "rollout.vllm_checks": 2.6,  # what vLLM cannot serve, read from the parts' declared needs
    "envs": 1.95,  # environments of multi-turn episodes (reset/step), the CodeAct harness, the FHIR store: tasks make them
    "tasks.env_check": 2.1,  # EvoEnv novelty: the audit's shingles and embedding checks (eval.audit_models)
    "distill.teacher": 2.2,  # the external teacher handle: loads models (models.loading), scores with distill.context
    "distill.teacher_outputs": 2.2,  # users' teacher outputs (JSONL): reads rows with tasks.files
    "data": 2,  # selectors, curricula, dataset builders: per-prompt state keyed by the item key
    "data.draft_files": 2.1, "data.draft_task": 2.2, "data.drafter": 2.3,  # drafts: loader, task wrapper, drafter (read tasks)
    "data.sft_rows": 2.1,  # supervised rows of tasks' items (reasonrl sft, VPD's warm start)
    "prompting": 2.2,  # prompt-policy RL: buffer, workers (models, rollout), the prompter's task (tasks)
    "population": 1,  # PopuLoRA's operators, ratings and PBT plan: numpy and openskill only
    "data.preferences": 2.3,  # preference pairs: a scripted judge's, sampled with rollout engines (reads tasks)
    "parts": 2.5,  # recipe parts name and configure implementations from L1-L2 (rollout strategies, teachers)
    "config": 3, "recipes": 3, "run_sections": 1.5,  # the run config's nested sections (rules only)
    "trainer": 4, "batch": 4, "eval.runner": 4, "tracking": 4, "checkpoint": 4, "plots": 4, "sft": 4, "run": 4, "warmstart": 4,
    "rm_train": 4,  # Bradley-Terry reward-model training (reasonrl rm train), beside sft
    "dist": 4,
    "diagnostics": 4,  # analyses of finished runs (unlearnability): read runs and models, train nothing
    "rules": 1,  # the config-value rule builders (validate and its per-method tables)
    "runtime": 4,  # the loop's side of the part protocol: each part's state and cache, checkpointed
    "stepdata": 4,  # one step's Batch and the pure operations on it
    "schedule": 4,  # the trainer's LR factor and minibatch split
    "validate": 4,  # reads the config, the parts' name tables and builds the task: above config and tasks
    "compare": 5, "commands": 5.5, "cli": 6, "__main__": 7,  # python -m reasonrl: the command itself
    "report": 5.2,  # reasonrl report: above compare (it reuses its plot and config_diff), below the commands
}


# layer-4 module -> the other layer-4 modules it may import (the loop's machinery, top to bottom)
TRAINER_SIDE = {
    "run": {"checkpoint", "dist", "eval.runner", "plots", "stepdata", "tracking", "trainer", "validate"},
    "trainer": {"batch", "stepdata", "checkpoint", "dist", "eval.runner", "schedule"},
    "batch": {"runtime", "stepdata"},
    "sft": {"eval.runner", "schedule"},
    "rm_train": {"checkpoint", "schedule"},
    "diagnostics": {"checkpoint", "eval.runner"},
    "eval.runner": {"checkpoint"},
    "dist": {"checkpoint"},  # the strategies load checkpoints (FSDP's shards from the whole state)
}


def layer_of(dotted: str) -> tuple[str, int]:
    for name in sorted(LAYERS, key=len, reverse=True):
        if dotted == name or dotted.startswith(name + "."):
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
                out.append(node.module[len("reasonrl."):])
        elif isinstance(node, ast.Import):
            out += [a.name[len("reasonrl."):] for a in node.names if a.name.startswith("reasonrl.")]
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
        if theirs == mine == 4:
            assert name in TRAINER_SIDE.get(me, ()), (
                f"{path.relative_to(SRC)} imports {target}: trainer-side module {me!r} may import only "
                f"{sorted(TRAINER_SIDE.get(me, ())) or 'no other trainer-side module'} (TRAINER_SIDE)")
            continue
        assert theirs < mine, f"{path.relative_to(SRC)} (layer {mine}) imports {target} (layer {theirs})"
        assert not (mine == 4 and name == "recipes"), f"{path.relative_to(SRC)}: the trainer side must not import recipes"


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
                return path[path.index(nxt):] + [nxt]
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
    graph = {"rewards.physics": {"rewards.physics_dense"}, "rewards.physics_dense": {"rewards.physics", "rewards.latex"},
             "rewards.latex": set()}
    assert find_cycle(graph) == ["rewards.physics", "rewards.physics_dense", "rewards.physics"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_rewards_do_not_import_torch():
    for path in (SRC / "rewards").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        mods += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(m == "torch" or m.startswith("torch.") for m in mods), path
