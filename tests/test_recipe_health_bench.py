"""benchmarks/learning/recipe_health.py shares the base's starting evaluation only between runs that evaluate the same
thing: a populora run (task azr) once got the arithmetic base's before.json (0.420, length 27.7) beside its own
final azr evaluation (0.000, length 7.1)."""

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "recipe_health", Path(__file__).parents[1] / "benchmarks" / "learning" / "recipe_health.py"
)
rh = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(rh)


@pytest.mark.parametrize(
    "entry, shared",
    [
        ("grpo", True),
        ("ssopd", True),
        ("lze", True),  # lze's run_defaults set data.pool: the held-out set is the same
        ("grpo:optim.lr=1e-5", True),
        ("drafts", False),  # wraps the task: the template is evaluated
        ("populora", False),
        ("evoenv", False),
        ("codeact", False),  # run_defaults set another task
        ("trafl", False),  # run_defaults set the diffusion model
        ("grpo:task=code", False),
        ("grpo:task_options.roles=solve", False),
        ("grpo:model=runs/x", False),
    ],
)
def test_base_evaluation_is_shared_only_for_the_same_task_and_model(entry, shared):
    assert rh.shares_base_eval(entry) is shared
