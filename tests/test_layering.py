"""The layering of DESIGN.md, enforced: imports only go down (layer-4 modules, the loop's
machinery, may use each other), rewards need no torch, nothing imports the CLI, and the trainer
side never imports the named recipes."""
import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "reasonrl"

# package or module (relative to reasonrl) -> layer
LAYERS = {
    "errors": 0,  # the user-error types: anything may raise them
    "seeds": 0,  # process-independent seeds
    "eval": 1,  # the package's __init__ only
    "rewards": 1, "advantages": 1, "losses": 1, "eval.metrics": 1,
    "eval.audit_sim": 1, "eval.audit_models": 2, "eval.audit_io": 3, "eval.audit": 4,  # contamination audit (spec 7)
    "eval.majority": 1.5,  # maj@k answer grouping: rewards (math-verify) and stdlib only
    "eval.refine": 4,  # test-time generate -> verify -> refine (SU-01): an engine, a task, beside eval.runner
    "models": 2, "tasks": 2, "rollout": 2, "distill": 2,
    "distill.teacher": 2.2,  # the external teacher handle: loads models (models.loading), scores with distill.context
    "distill.teacher_outputs": 2.2,  # users' teacher outputs (JSONL): reads rows with tasks.files
    "data": 2,  # selectors, curricula, dataset builders: per-prompt state keyed by the item key
    "data.draft_files": 2.1, "data.draft_task": 2.2, "data.drafter": 2.3,  # drafts: loader, task wrapper, drafter (read tasks)
    "parts": 2.5,  # recipe parts name and configure implementations from L1-L2 (rollout strategies, teachers)
    "config": 3, "recipes": 3,
    "trainer": 4, "batch": 4, "eval.runner": 4, "tracking": 4, "checkpoint": 4, "plots": 4, "sft": 4, "run": 4, "warmstart": 4,
    "dist": 4,
    "diagnostics": 4,  # analyses of finished runs (unlearnability): read runs and models, train nothing
    "rules": 1,  # the config-value rule builders (validate and its per-method tables)
    "validate_methods": 4,  # the rules of the #13/#14 methods' options, included in validate.RULES
    "schedule": 4,  # the trainer's LR factor and minibatch split
    "validate": 4,  # reads the config, the parts' name tables and builds the task: above config and tasks
    "compare": 5, "commands": 5.5, "cli": 6, "__main__": 7,  # python -m reasonrl: the command itself
    "report": 5.2,  # reasonrl report: above compare (it reuses its plot and config_diff), below the commands
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


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_go_down(path):
    me, mine = layer_of(".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__"))
    for target in imports_of(path):
        name, theirs = layer_of(target)
        if name == me:
            continue
        assert theirs < mine or theirs == mine == 4, f"{path.relative_to(SRC)} (layer {mine}) imports {target} (layer {theirs})"
        assert not (mine == 4 and name == "recipes"), f"{path.relative_to(SRC)}: the trainer side must not import recipes"


def test_rewards_do_not_import_torch():
    for path in (SRC / "rewards").rglob("*.py"):
        tree = ast.parse(path.read_text())
        mods = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
        mods += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
        assert not any(m == "torch" or m.startswith("torch.") for m in mods), path
