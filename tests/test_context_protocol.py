"""The part protocol's contexts carry data plus what a part declared (issue 44 item 2): every field typed
(no ``Any``), every field read somewhere, the abilities one part uses given only to the parts that declare
them, and one return shape, ``(value, metrics)``, for every hook.

``python tests/test_context_protocol.py [SRC]`` prints the counts (fields, typed Any, never read, read by
one reader) of the contexts in ``SRC/reasonrl/parts/protocol.py`` (default: this checkout's src/).
"""

import ast
import dataclasses
import itertools
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import torch

HOOK_CTX = {
    "wrap_task": "TaskSetup",
    "setup_model": "ModelSetup",
    "setup_modules": "ModelSetup",
    "before_step": "RoundContext",
    "draw": "RoundContext",
    "extend": "RoundContext",
    "score_batch": "BatchContext",
    "shape_advantages": "BatchContext",
    "loss_term": "LossContext",
    "after_step": "UpdateContext",
}
SRC = Path(__file__).resolve().parents[1] / "src"


def context_fields(src: Path) -> dict[str, dict[str, str]]:
    """context class -> {field: annotation text}, read from the source (so an older checkout counts too)."""
    tree = ast.parse((src / "reasonrl" / "parts" / "protocol.py").read_text())
    return {
        node.name: {s.target.id: ast.unparse(s.annotation) for s in node.body if isinstance(s, ast.AnnAssign)}
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name in set(HOOK_CTX.values())
    }


def _kinds(fn: ast.FunctionDef, arg: ast.arg, cls: ast.ClassDef | None, fields: dict) -> list[str]:
    """The contexts ``arg`` of ``fn`` may be: its annotation, its hook's, or any (an untyped ``ctx``)."""
    ann = ast.unparse(arg.annotation).strip("'\"") if arg.annotation else ""
    if cls is not None and cls.name in fields and arg.arg == "self":
        return [cls.name]  # a context's own methods (agg_kwargs) read its fields
    if ann in fields:
        return [ann]
    if arg.arg == "ctx" and fn.name in HOOK_CTX and not ann:
        return [HOOK_CTX[fn.name]]
    return list(fields) if arg.arg == "ctx" and ann in ("", "Any") else []


def readers(src: Path, fields: dict[str, dict[str, str]]) -> dict[tuple[str, str], set[str]]:
    """(context, field) -> the modules (a part: its module) whose functions read ``<context arg>.field``."""
    got: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in (src / "reasonrl").rglob("*.py"):
        tree, rel = ast.parse(path.read_text()), str(path.relative_to(src / "reasonrl"))
        for cls in [None] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for fn in (tree if cls is None else cls).body:
                if not isinstance(fn, ast.FunctionDef):
                    continue
                for arg in fn.args.args:
                    for kind in _kinds(fn, arg, cls, fields):
                        for n in ast.walk(fn):
                            if (
                                isinstance(n, ast.Attribute)
                                and isinstance(n.value, ast.Name)
                                and n.value.id == arg.arg
                                and n.attr in fields[kind]
                            ):
                                got[(kind, n.attr)].add(rel)
    return got


def counts(src: Path = SRC) -> dict[str, object]:
    fields = context_fields(src)
    got = readers(src, fields)
    every = [(c, f, t) for c, fs in fields.items() for f, t in fs.items()]
    bare = lambda t: "Any" in [p.strip() for p in t.split("[")[0].split("|")]  # noqa: E731 - Any, Any | None
    return {
        "fields": len(every),
        "typed_any": [(c, f) for c, f, t in every if bare(t)],
        "mentions_any": [(c, f) for c, f, t in every if "Any" in t],
        "never_read": [(c, f) for c, f, _ in every if not got[(c, f)]],
        "one_reader": [(c, f, next(iter(got[(c, f)]))) for c, f, _ in every if len(got[(c, f)]) == 1],
    }


def test_every_context_field_is_typed_and_read():
    got = counts()
    # before issue 44: 85 fields, 25 bare Any, 39 mentioning Any (Callable[..., Any], list[Any], ...), 8 never read
    assert got["typed_any"] == [] and got["mentions_any"] == []
    assert got["never_read"] == []
    assert got["fields"] == 78


def test_the_counter_counts_what_it_reads(tmp_path):
    """The counter on a protocol of two hand-written contexts: 3 fields, one bare Any, one mentioning Any,
    one read by nobody, one read by one module (b.py)."""
    (tmp_path / "reasonrl" / "parts").mkdir(parents=True)
    (tmp_path / "reasonrl" / "parts" / "protocol.py").write_text(
        "class TaskSetup:\n    task: Any\n    seed: int\n\nclass UpdateContext:\n    step: Callable[..., Any]\n"
    )
    (tmp_path / "reasonrl" / "b.py").write_text("def wrap_task(ctx):\n    return ctx.task\n")
    got = counts(tmp_path)
    assert got["fields"] == 3 and got["typed_any"] == [("TaskSetup", "task")]
    assert got["mentions_any"] == [("TaskSetup", "task"), ("UpdateContext", "step")]
    assert got["never_read"] == [("TaskSetup", "seed"), ("UpdateContext", "step")]
    assert got["one_reader"] == [("TaskSetup", "task", "b.py")]


def test_batch_is_below_the_parts_and_typed_in_the_contexts():
    from reasonrl.parts import protocol
    from reasonrl.rollout.batch import Batch

    assert protocol.Batch is Batch and Batch.__module__ == "reasonrl.rollout.batch"
    fields = context_fields(SRC)
    assert fields["LossContext"]["batch"] == "Batch" and fields["RoundContext"]["batch"] == "Batch | None"


def test_an_ability_reaches_only_the_part_that_declared_it():
    from reasonrl.parts.protocol import ABILITIES, NEEDS, UpdateContext, granted

    assert set(ABILITIES) <= set(NEEDS)
    for need, names in ABILITIES.items():  # every ability is an optional field of some context, None by default
        for name in names:
            owners = [c for c in HOOK_CTX.values() if name in context_fields(SRC)[c]]
            assert owners and all(context_fields(SRC)[c][name].endswith("| None") for c in owners), (need, name)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    ctx = UpdateContext(model=torch.nn.Linear(1, 1), step=1, seed=0, state={}, optimizer=opt)
    assert granted(ctx, frozenset()).optimizer is None and granted(ctx, frozenset({"optimizer"})).optimizer is opt
    assert granted(ctx, frozenset({"reference"})).optimizer is None  # another need gives nothing else


def test_the_parts_that_use_an_ability_declare_it():
    from reasonrl.parts import KDRL, TGPO, PopuLoRA, Redirect, StepCredit, TrajectoryBalance
    from reasonrl.parts.protocol import part_needs

    assert "branch" in part_needs(Redirect()) and "optimizer" in part_needs(PopuLoRA())
    assert "char_offsets" in part_needs(StepCredit()) and "extra_labels" in part_needs(TGPO(variant="reg"))
    assert "extra_labels" not in part_needs(TGPO(variant="adv"))  # adv scores the ids itself, before the update
    assert "exclude_rows" in part_needs(TrajectoryBalance(log_z="table", table="z.jsonl"))
    assert "exclude_rows" not in part_needs(TrajectoryBalance(log_z="head"))
    assert part_needs(KDRL()) == frozenset()  # the teacher's scores: its own channel, copied in score_batch


def _hook_functions():
    """(part class name, hook, function) of every hook a part (or a strategy protocol) in src/reasonrl/parts defines
    (every hook of the protocol returns (value, metrics))."""
    from reasonrl.parts.protocol import HOOKS

    for path in sorted((SRC / "reasonrl" / "parts").glob("*.py")):
        for cls in ast.parse(path.read_text()).body:
            if isinstance(cls, ast.ClassDef):
                for fn in cls.body:
                    if isinstance(fn, ast.FunctionDef) and (
                        fn.name in HOOKS or (fn.name == "__call__" and cls.name in ("EDAS", "StepCredit"))
                    ):
                        yield cls.name, fn.name, fn


@pytest.mark.parametrize("name,hook,fn", list(_hook_functions()), ids=lambda x: x if isinstance(x, str) else "")
def test_every_hook_returns_value_and_metrics(name, hook, fn):
    ann = ast.unparse(fn.returns) if fn.returns else ""
    assert ann.startswith("tuple[") and ann.endswith("dict[str, float]]"), f"{name}.{hook} -> {ann or 'unannotated'}"
    for ret in (n for n in ast.walk(fn) if isinstance(n, ast.Return)):
        assert isinstance(ret.value, ast.Tuple) and len(ret.value.elts) == 2 or isinstance(ret.value, ast.Call), (
            f"{name}.{hook} line {ret.lineno}: returns {ast.unparse(ret.value) if ret.value else 'nothing'}"
        )


def test_the_loop_refuses_another_shape_naming_the_part():
    from reasonrl.parts.protocol import hook_result

    assert hook_result("toy", "score_batch", (None, {"a": 1.0})) == (None, {"a": 1.0})
    with pytest.raises(TypeError, match=r"part 'toy': after_step returned dict; a hook returns \(value, metrics\)"):
        hook_result("toy", "after_step", {"a": 1.0})
    with pytest.raises(TypeError, match="part 'vpd': shape_advantages returned Tensor"):
        hook_result("vpd", "shape_advantages", torch.zeros(2))


@dataclasses.dataclass(frozen=True)
class Hooked:
    """A part that draws the task's own items, generates plainly and adds no groups: each hook reports a count,
    or (``bare``) returns the hook's value alone, as the six hooks did before issue 44 item 2."""

    bare: str = ""  # the hook that returns its bare value

    def _out(self, hook, value, metrics):
        return value if hook == self.bare else (value, metrics)

    def draw(self, ctx, n):
        items = list(itertools.islice(ctx.task.iter_items("train", ctx.seed), ctx.position, ctx.position + n))
        return self._out("draw", items, {"hooked/drawn": float(n)})

    def generate(self, req):
        from reasonrl.parts import PlainSampling

        ro, _ = PlainSampling().generate(req)
        return self._out("generate", ro, {"hooked/rows": float(len(ro.texts))})

    def extend(self, ctx):
        return self._out("extend", None, {"hooked/first_groups": float(len(ctx.batch.items))})


def _maker(part):
    from reasonrl.loop.batch import BatchMaker
    from reasonrl.recipes import get_recipe
    from reasonrl.tasks import get_task

    from fakes import FakeEngine

    grpo, task = get_recipe("grpo"), get_task("arithmetic")
    recipe = dataclasses.replace(grpo, group_size=2, parts=grpo.parts.merged({"hooked": part}))
    return BatchMaker(task, recipe, FakeEngine(task), budget=20, seed=0)


def test_the_metrics_of_draw_generate_and_extend_join_the_steps():
    b = _maker(Hooked()).make(3)
    # 3 items drawn, 3 x G=2 rows generated, the round saw the 3 first-round groups (and added none)
    assert (b.metrics["hooked/drawn"], b.metrics["hooked/rows"], b.metrics["hooked/first_groups"]) == (3.0, 6.0, 3.0)
    assert len(b.items) == 3 and b.group_kinds().tolist() == [0, 0, 0]


@pytest.mark.parametrize("hook,kind", [("draw", "list"), ("generate", "Rollouts"), ("extend", "NoneType")])
def test_a_bare_value_from_a_step_hook_stops_the_loop_naming_the_part(hook, kind):
    with pytest.raises(TypeError, match=rf"part 'hooked': {hook} returned {kind}; a hook returns \(value, metrics\)"):
        _maker(Hooked(bare=hook)).make(2)


def test_a_bare_value_from_wrap_task_stops_the_run_naming_the_part():
    from reasonrl.parts import Drafts, Recipe
    from reasonrl.tasks import get_task

    class BareDrafts(Drafts):
        def wrap_task(self, ctx):
            return super().wrap_task(ctx)[0]  # the task alone

    task = get_task("arithmetic")
    wrapped, metrics = Recipe("x", drafts=Drafts(mode="no_draft")).wrap_task(task)
    assert wrapped is not task and metrics == {}
    with pytest.raises(TypeError, match=r"part 'drafts': wrap_task returned DraftTask"):
        Recipe("x", parts={"drafts": BareDrafts(mode="no_draft")}).wrap_task(task)


def test_no_part_calls_another_parts_private_methods():
    """``other._name(...)`` inside src/reasonrl/parts, where ``other`` is not ``self``/``cls`` (PopuLoRA called
    ``AZR()._check`` before issue 44): none."""
    found = []
    for path in sorted((SRC / "reasonrl" / "parts").glob("*.py")):
        for n in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr.startswith("_")
                and not n.func.attr.startswith("__")
                and not (isinstance(n.func.value, ast.Name) and n.func.value.id in ("self", "cls"))
            ):
                found.append(f"{path.name}:{n.lineno} {ast.unparse(n.func)}")
    assert found == []


def test_no_part_reads_the_batch_channels_or_rewrites_its_masks():
    """A part reads other parts' data through ``ctx.channels`` (score_batch) and takes rows out of the loss
    through its declared ``exclude_rows``: no ``batch.parts`` read, and in a function given a batch's or a
    micro-batch's context no write to a mask (``train_mask``, ``loss_mask``) or to the batch's rollouts."""
    fields, found = context_fields(SRC), []
    for path in sorted((SRC / "reasonrl" / "parts").glob("*.py")):
        if path.name == "protocol.py":
            continue
        tree = ast.parse(path.read_text())
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr == "parts" and ast.unparse(n.value).endswith("batch"):
                found.append(f"{path.name}:{n.lineno} {ast.unparse(n)}")
        for cls in [None] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
            for fn in (tree if cls is None else cls).body:
                if not isinstance(fn, ast.FunctionDef) or not any(
                    {"BatchContext", "LossContext"} & set(_kinds(fn, a, cls, fields)) for a in fn.args.args
                ):
                    continue
                for n in ast.walk(fn):
                    targets = (
                        n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign) else []
                    )
                    for t in map(ast.unparse, targets):
                        if "train_mask" in t or "loss_mask" in t or t.startswith(("ctx.batch.", "ctx.rollouts.")):
                            found.append(f"{path.name}:{n.lineno} {t} = ...")
    assert found == []


if __name__ == "__main__":
    got = counts(Path(sys.argv[1]) if len(sys.argv) > 1 else SRC)
    print(
        f"fields {got['fields']}, typed Any {len(got['typed_any'])}, mentioning Any {len(got['mentions_any'])}, "
        f"never read {len(got['never_read'])}, read by one reader {len(got['one_reader'])}"
    )
    for key in ("typed_any", "mentions_any", "never_read", "one_reader"):
        print(f"  {key}: {got[key]}")
