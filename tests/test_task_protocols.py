"""The task's optional abilities as Protocols (issue 44 item 3): each one recognised on a real task that
has it and refused on one without, the one-line error a part's missing ability gives before anything
loads, and the number of getattr/hasattr probes on tasks left in src (at most 20; before: 21 calls on
19 attributes, name included; after: 1, the sandbox check's untrusted_code flag).
``python tests/test_task_protocols.py [SRC]`` prints the counts."""

import ast
import json
import sys
from pathlib import Path

import pytest

from reasonrl.config.train import split_config
from reasonrl.config.validate import check_inputs, task_problems
from reasonrl.errors import UserError
from reasonrl.models.chat import PLAIN
from reasonrl.parts.episodes import EpisodicTask
from reasonrl.parts.redirect import Redirect
from reasonrl.recipes import get_recipe
from reasonrl.rollout.agent import EpisodeOptions
from reasonrl.tasks import FileTask, GuidedTask, get_task
from reasonrl.tasks.limits import LimitedTask
from reasonrl.tasks.protocols import (
    ABILITIES,
    DEFAULT_BUDGET,
    Branching,
    Episodic,
    Fitting,
    Judged,
    PreparesBatches,
    ReadsGenerated,
    WithBudget,
    WithCritiquePrompt,
    WithCritiques,
    WithDiagnostics,
    WithEnvironments,
    WithHints,
    WithSolutions,
    WithStepRewards,
    WithSteps,
    budget,
    members,
    provides,
    require,
)

SRC = Path(__file__).resolve().parents[1] / "src" / "reasonrl"
MAX_PROBES = 20  # the bound on getattr/hasattr calls on a task left in src


# ------------------------------------------------------------------ the probe counter (also a script)


def is_task_expr(node: ast.AST) -> bool:
    """A task object by its name: ``task``, ``ctx.task``, ``self.task``, ``task_cls``, ``inner_task`` ..."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name is not None and (name == "task" or name.endswith("task") or name.startswith("task_"))


def probes(root: Path) -> dict[str, list[tuple[str, int, str]]]:
    """Every getattr/hasattr call under ``root``: ``all`` of them and ``task``, those whose first argument is
    a task object, as (file, line, attribute probed or ``?`` when not a literal)."""
    out: dict[str, list[tuple[str, int, str]]] = {"all": [], "task": []}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
            ):
                continue
            attr = node.args[1].value if isinstance(node.args[1], ast.Constant) else "?"
            row = (str(path.relative_to(root)), node.lineno, attr)
            out["all"].append(row)
            if is_task_expr(node.args[0]):
                out["task"].append(row)
    return out


def test_the_counter_finds_task_probes_and_nothing_else(tmp_path):
    # 2 of the 4 calls take a task (a name ending in task); getattr(self, ...) and hasattr(model, ...) do not
    (tmp_path / "m.py").write_text(
        "getattr(ctx.task, 'fit', None)\nhasattr(task, 'judge')\n"
        "getattr(self, 'x')\nhasattr(model, 'config')\nx.getattr(task, 'y')\n"
    )
    found = probes(tmp_path)
    assert len(found["all"]) == 4
    assert found["task"] == [("m.py", 1, "fit"), ("m.py", 2, "judge")]


def test_at_most_twenty_probes_on_tasks_are_left():
    left = probes(SRC)["task"]
    assert len(left) <= MAX_PROBES, (
        f"getattr/hasattr on a task crept back (declare a protocol in tasks/protocols.py instead): {left}"
    )


# ------------------------------------------------------------------ each ability on real tasks


def _file_task(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"{i}+1=?", "answer": str(i + 1)}) + "\n" for i in range(4)))
    return FileTask(str(path), test_fraction=0.0)


HAS_AND_LACKS = [  # (ability, a real task with it, one without)
    (WithBudget, lambda p: get_task("arithmetic"), _file_task),
    (PreparesBatches, lambda p: get_task("azr"), lambda p: get_task("arithmetic")),
    (WithDiagnostics, lambda p: get_task("temporal"), lambda p: get_task("multipart")),
    (WithEnvironments, lambda p: get_task("fhir"), lambda p: get_task("arithmetic")),
    (Episodic, lambda p: EpisodicTask(get_task("fhir"), EpisodeOptions()), lambda p: get_task("fhir")),
    (Branching, lambda p: get_task("code"), lambda p: get_task("arithmetic")),
    (WithStepRewards, lambda p: get_task("recommend"), lambda p: get_task("arithmetic")),
    (ReadsGenerated, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
    (Judged, lambda p: get_task("explain"), lambda p: get_task("arithmetic")),
    (Fitting, lambda p: LimitedTask(get_task("arithmetic"), PLAIN, 64, "drop"), lambda p: get_task("arithmetic")),
    (WithHints, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
    (WithSolutions, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
    (WithCritiques, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
    (WithSteps, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
    (WithCritiquePrompt, lambda p: get_task("arithmetic"), lambda p: get_task("code")),
]


def test_every_ability_is_tested():
    assert {a for a, _, _ in HAS_AND_LACKS} == set(ABILITIES)


@pytest.mark.parametrize("ability,has,lacks", HAS_AND_LACKS, ids=[a.__name__ for a, _, _ in HAS_AND_LACKS])
def test_ability_recognised_and_refused(ability, has, lacks, tmp_path):
    assert provides(has(tmp_path), ability)
    without = lacks(tmp_path)
    assert not provides(without, ability)
    with pytest.raises(
        UserError,
        match=rf"^the part needs a task with {ability.__name__}: task '{without.name}' "
        rf"has no {members(ability)[0]}",
    ):
        require(without, ability, "the part")


def test_a_wrapper_has_its_own_abilities_and_the_wrapped_task_s():
    limited = LimitedTask(get_task("code"), PLAIN, 64, "drop")
    assert provides(limited, Fitting) and provides(limited, Branching) and not provides(limited, WithHints)
    assert budget(limited) == get_task("code").max_new_tokens  # forwarded, not the default


def test_guided_task_gives_only_the_kinds_its_files_give(tmp_path):
    code = get_task("code")
    item = next(code.iter_items("train", 0))
    path = tmp_path / "hints.jsonl"
    path.write_text(json.dumps({"key": item.key, "hints": ["trace the loop"]}) + "\n")
    guided = GuidedTask(code, hints=str(path))
    assert provides(guided, WithHints) and guided.hints(item) == ["trace the loop"]
    assert not provides(guided, WithSolutions) and not provides(guided, WithCritiques)  # code has none
    assert provides(GuidedTask(get_task("arithmetic"), hints=str(path)), WithSolutions)  # arithmetic's own


def test_the_default_budget():
    assert DEFAULT_BUDGET == 128 and budget(type("Bare", (), {"name": "bare"})()) == 128
    assert budget(get_task("fhir")) == 256  # a class attribute counts as well as a property


# ------------------------------------------------------------------ checked once, before anything loads


def test_a_part_s_missing_ability_is_one_line_naming_task_part_and_method():
    (line,) = task_problems(get_task("code"), get_recipe("nudgerl"))
    assert line.startswith(
        "recipe 'nudgerl': its part 'hints' needs a task with WithHints, but task 'code' has no hints() ("
    )
    assert task_problems(get_task("arithmetic"), get_recipe("nudgerl")) == []
    # the same part, conditional on its options: stride's critic=task needs critiques, critic=model does not
    (line,) = task_problems(get_task("code"), get_recipe("stride"))
    assert line.startswith(
        "recipe 'stride': its part 'redirect' needs a task with WithCritiques, but task 'code' "
        "has no critique() (Its own stepwise critique"
    )
    assert Redirect(critic="model").task_needs == () and Redirect().task_needs == (WithCritiques,)


def test_check_inputs_refuses_before_the_model_is_looked_at():
    cfg, _ = split_config({"task": "recommend", "model": "/no/such/model"})
    with pytest.raises(
        UserError,
        match=r"^recipe 'codethinker': its part 'beam' needs a task with Branching, but "
        r"task 'recommend' has no branch_point\(\)",
    ):
        check_inputs(cfg, get_recipe("codethinker"))


def test_guidance_files_count_for_the_check(tmp_path):
    code = get_task("code")
    item = next(code.iter_items("train", 0))
    path = tmp_path / "hints.jsonl"
    path.write_text(json.dumps({"key": item.key, "hints": ["trace the loop"]}) + "\n")
    cfg, _ = split_config({"task": "code", "guidance": {"hints": str(path)}, "model": "/no/such/model"})
    with pytest.raises(UserError, match="model"):  # the task check passed: the model name is the next one
        check_inputs(cfg, get_recipe("nudgerl"))


if __name__ == "__main__":
    found = probes(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
    print(
        f"getattr/hasattr calls: {len(found['all'])}; on a task: {len(found['task'])} "
        f"({len({a for _, _, a in found['task']})} attributes)"
    )
    for row in found["task"]:
        print("  %s:%d %s" % row)
