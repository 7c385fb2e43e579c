"""Recipe health table (issue #26 item 8): one row per registered recipe, read from the JSON of the measurements
already made (nothing is trained or evaluated here).

    python benchmarks/learning/health_table.py             # prints the table, writes results/recipe_health/table.json
    python benchmarks/learning/health_table.py --markdown  # the same as markdown (docs/health.md pastes it)

Every source is declared once in SOURCES: its result file (`path`, what the table cites; the table reads its
measurement, `X.measurement.json` beside it, the one format of measurements.py, with one reader), how that file is
converted (`kind` and the conversion's options, read by measurements.py only), the setting it ran in (SETTINGS:
the base, pool, adapters, task; the rows are comparable only within one setting), the recipes it is the main
measurement of (`primary`, recipe -> entry as written in the JSON) and the reference recipe of the measurement
(`baseline`, grpo unless stated; `tests=False` where the two trained on different tasks: no Welch p or paired
difference is shown). Every other entry of a source (ablations, older defaults, other settings) goes to
the "other measurements" table. A number the result file does not hold is left empty, never filled in: the only
derived values are the s/step ratio (the two s/step of the measurement, where it has no ratio), the conversion's
(measurements.py) and the sign of a paired difference when the measurement's reference is the recipe itself
(physics: gspo - physics_r1 shown as physics_r1 - gspo). Missing measurements are skipped and named. A recipe in
no source is "not measured", with the command that measures it. After a new result file: add its source here,
then `python benchmarks/learning/measurements.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from measurements import FIELDS as FIELDS_BY_NAME, measurement_path, read_measurement

ROOT = Path(__file__).resolve().parents[2]
R = "benchmarks/results/"
SHIPPED = "the shipped base (held-out greedy pass@1 0.420), arithmetic, 8 prompts x 8 samples a step, full fine-tuning"
SETTINGS = {
    "base": f"{SHIPPED}, the endless train stream, 500 held-out problems",
    "pool128": f"{SHIPPED}, a pool of 128 train problems (data.pool=128), 500 held-out problems; two compares side "
    "by side, one process per core (seconds comparable within the table)",
    "lora": "as pool128 but LoRA adapters lora.r=8 for both recipes (vpd needs them)",
    "drafts_mix": "a learner warm-started 150 steps from the shipped base on the drafts template with half the "
    "draws plain (drafts warmstart --plain-rate 0.5, the default now): 0.110 in the template, 0.935 "
    "plain (200 problems); the drafts rows evaluated in the template, grpo on plain prompts",
    "drafts": "a learner warm-started 150 steps on the drafts template (0.100 in it, 0.058 plain); 500 held-out "
    "problems, the drafts rows evaluated in the template, grpo on plain prompts",
    "ctx": "the context-mix warm start runs/ctxbase45 (plain pass@1 0.53), 500 held-out problems; s/step from one "
    "15-step run per recipe on an idle machine (compare_selfteach/step_seconds.json)",
    "ctx2": "the context-mix warm start regenerated (pass@1 0.504), 2 seeds, 500 held-out problems",
    "ctx3": "the context-mix warm start regenerated again on 2026-12-02 (pass@1 0.504 as ctx2: the same command gives "
    "the same model), 500 held-out problems, recipe_health.py beside another benchmark",
    "ar100": f"{SHIPPED}, 100 held-out problems (greedy; pass@k from 64 samples in the JSON)",
    "grlo": "the shipped base; grlo trains on explain against a Bradley-Terry reward model (held-out pairwise "
    "0.708), grpo on arithmetic; pass@1 is arithmetic on 500 held-out problems (grlo: transfer)",
    "fhir50": "CodeAct on fhir from a warm start in the learning zone (0.500), episodes.max_obs_tokens=96, 100 "
    "held-out questions; no grpo run: its s/step is single-turn grpo on arithmetic",
    "fhir86": "as fhir50 but from a warm start at 0.860 and the default observation cap",
    "fhir50_judge": "as fhir50; codeact_judge trained on the verdicts of a scripted judge, no judge model "
    "(benchmarks/judges/fhir_rule_judge.py: `judge` exact, `noisy_judge` 20% of verdicts reversed)",
    "shipped_other_task": f"{SHIPPED} for grpo; the recipe from the same base on its own task (populora: the azr "
    "program world), where that base scores 0: a health check (the run finishes, what its "
    "format does), not a comparison",
    "azr_pop": "AZR's program world from its warm start (runs/selfplay/bases/azr: 0.300 on these 150 held-out "
    "problems), LoRA r=8 on both sides, 30 steps; reference a compute-matched single AZR agent (the same "
    "adapter rank, steps and data per adapter); the recipe's row is its population's mean student",
    "temporal": "the temporal task from its own warm start (0.530), 200 held-out problems",
    "diagnosis": "the diagnosis task from its own warm start (0.385), 200 held-out problems",
    "recommend": "the recommend task from its own warm start (0.310), loss.clip_high=0.28, 200 held-out problems",
    "recommend_lr": "as recommend but optim.lr=2e-4 and no loss.clip_high override",
    "recommend_soft": "the recommend task from a softer warm start (0.155), 200 held-out problems",
    "code": "the code task from its own warm start (0.315), 200 held-out problems",
    "spaced": "arithmetic from a warm start with 5% spaced demonstrations (0.510), 200 held-out problems; the "
    "reference is vspo:steering=null (the same shaped reward, no steering)",
    "multipart": "the multipart task from its own warm start (0.475 on the 200 held-out problems); reference gspo",
    "diffusion": "the shipped masked-diffusion LM (0.075), arithmetic; reference diffu_grpo",
    "pp_base": "prompt_policy: the shipped base as the frozen worker on arithmetic up to 3 digits, 3 contexts "
    "(max_digits), 40 held-out instances each; pass@1 is the worker's accuracy with the prompter's "
    "one-shot prompt, the reference 'none' the worker with no prompt",
    "azr": "AZR's program world from its warm start, rebuilt after issue 41 (0.200 on 200 held-out solver problems, "
    "below its 0.5 target); grpo on the task's gold programs (task_options.roles=solve)",
    "smollm2": "SmolLM2-135M-Instruct (`reasonrl models get smollm2-135m-instruct`; 0.312 held-out greedy on these 32 "
    "word_math problems), LoRA r=16, 2 prompts x 4 samples a step, 96 new tokens, one seed: a health check "
    "on a real model (the run finishes, what its part does), not a comparison; peak memory in "
    "docs/models-and-data.md",
    "evoenv": "EvoEnv's environment world from its warm start (0.385 on 200 held-out instances of the starting "
    "environments, below its 0.5 target); grpo on the starting environments (task_options.roles=solve)",
}
SSOPD_NOW = "ssopd:ssopd.w_star=eos:ssopd.clip=1.0"  # the recipe's defaults since issue #26
DRAFTS = "drafts:drafts.file=/work/main/runs/drafts.jsonl"
SOURCES = [
    dict(
        path=R + "recipe_health/ssopd_3seeds.json",
        kind="compare",
        setting="base",
        doc="selfteach.md",
        primary={"grpo": "grpo", "ssopd": SSOPD_NOW},
        note="ssopd's entry spells out the defaults it has now",
    ),
    dict(
        path=R + "recipe_health/base_more.json",
        kind="compare",
        setting="base",
        doc="health.md",
        primary={n: n for n in ("dr_grpo", "rloo", "reinforce_pp", "cispo", "sage", "corr_po")},
        note="grpo here is the same three runs as in ssopd_3seeds.json "
        "(CPU runs are deterministic: 0.612, 0.540, 0.630)",
    ),
    dict(
        path=R + "compare_13_14/data.json",
        kind="compare",
        setting="pool128",
        steps=60,
        doc="results.md",
        primary={n: n for n in ("lze", "d2evo", "su01", "fest", "gspo")},
    ),
    dict(
        path=R + "compare_13_14/teacher.json",
        kind="compare",
        setting="pool128",
        steps=60,
        doc="teacher.md",
        primary={n: n for n in ("tgpo", "tgpo_adv", "rkl_opd", "kdrl")},
    ),
    dict(
        path=R + "compare_13_14/vpd.json",
        kind="compare",
        setting="lora",
        steps=60,
        doc="vpd.md",
        primary={"vpd": "vpd"},
    ),
    dict(
        path=R + "compare_13_14/drafts.json",
        kind="compare",
        setting="drafts",
        steps=60,
        doc="drafts.md",
        primary={"drafts": DRAFTS},
    ),
    dict(
        path=R + "recipe_health/drafts_mix.json",
        kind="compare",
        setting="drafts_mix",
        doc="drafts.md",
        primary={},
        note="seed 0 (a screen); the built-in drafter's drafts",
    ),
    dict(
        path=R + "recipe_health/drafts_mix_seed1.json",
        kind="compare",
        setting="drafts_mix",
        doc="drafts.md",
        primary={},
        note="seed 1 of the same setting, a later session (the warm start rebuilt: the same learner)",
    ),
    dict(
        path=R + "recipe_health/drafts_mix_seed2.json",
        kind="compare",
        setting="drafts_mix",
        doc="drafts.md",
        primary={},
        note="seed 2 of the same setting, 2026-12-05 (the warm start rebuilt again: the same learner)",
    ),
    dict(
        path=R + "recipe_health/vpd_warm.json",
        kind="compare",
        setting="lora",
        doc="vpd.md",
        primary={},
        note="vpd.warm_steps=100, 3 seeds; vpd.warm_steps=0 is the default (the main row)",
    ),
    dict(
        path=R + "compare_grpo_dapo_edas_mugrpo/compare.json",
        kind="compare",
        setting="base",
        doc="compare.md",
        primary={n: n for n in ("dapo", "edas", "mu_grpo")},
    ),
    dict(
        path=R + "compare_selfteach/compare_3seeds.json",
        kind="compare",
        setting="ctx",
        doc="selfteach.md",
        seconds=R + "compare_selfteach/step_seconds.json",
        primary={n: n for n in ("cipo", "stride", "nudgerl")},
        note="ssopd here ran at the spec's defaults then (no clip, w* any); egrsd and cl_egrsd at magnitude 'abs', "
        "the default then",
    ),
    dict(
        path=R + "recipe_health/egrsd_ctx.json",
        kind="compare",
        setting="ctx3",
        doc="selfteach.md",
        primary={"egrsd": "egrsd:egrsd.magnitude=ratio"},
        note="egrsd (bare) is magnitude 'abs', the default before this measurement; 'ratio' is the default now",
    ),
    dict(
        path=R + "recipe_health/cl_egrsd_ctx.json",
        kind="compare",
        setting="ctx3",
        doc="selfteach.md",
        primary={"cl_egrsd": "cl_egrsd"},
        note="cl_egrsd at magnitude 'ratio', its default now",
    ),
    dict(
        path=R + "compare_selfteach/replication_2seeds/compare.json",
        kind="compare",
        setting="ctx2",
        doc="selfteach.md",
        primary={},
        note="ssopd at the spec's defaults then",
    ),
    dict(path=R + "recipe_health/ssopd_screen.json", kind="compare", setting="base", doc="selfteach.md", primary={}),
    dict(
        path=R + "ppo/ppo_vs_grpo.json",
        kind="compare",
        table="compare_table",
        setting="base",
        doc="ppo.md",
        seconds=R + "ppo/speed.json",
        primary={"ppo": "ppo"},
        note="s/step from 12-step runs on an idle machine (ppo/speed.json)",
    ),
    dict(
        path=R + "grlo/transfer_kl05.json",
        kind="grlo",
        setting="grlo",
        doc="ppo.md",
        primary={"grlo": "grlo"},
        note="kl.coef=0.5, the default now",
    ),
    dict(
        path=R + "grlo/transfer.json",
        kind="grlo",
        setting="grlo",
        doc="ppo.md",
        primary={},
        note="kl.coef=0, the paper's setting and the default then",
    ),
    dict(
        path=R + "distmatch/ar.json",
        kind="distmatch",
        setting="ar100",
        doc="distmatch.md",
        primary={"flowrl": "flowrl"},
        note="Welch p in the JSON is on sampled pass@1: not shown; disa here at beta "
        "15 (the spec's, the default before), beside grpo on its pool (grpo:data.pool=128)",
    ),
    dict(
        path=R + "distmatch/disa_beta1.json",
        kind="compare",
        setting="ar100",
        doc="distmatch.md",
        primary={"disa": "disa:balance.beta=1"},
        note="disa at beta 1, its default since this measurement; the "
        "reference, grpo on the same pool of 128, is in distmatch/ar.json (0.583 +- 0.006)",
    ),
    dict(
        path=R + "distmatch/diffusion.json",
        kind="distmatch",
        setting="diffusion",
        baseline="diffu_grpo",
        doc="distmatch.md",
        primary={"diffu_grpo": "diffu_grpo", "trafl": "trafl"},
    ),
    dict(
        path=R + "selfplay/azr/compare.json",
        kind="compare",
        setting="azr",
        doc="results.md",
        steps=30,
        primary={"azr": "azr"},
    ),
    dict(
        path=R + "selfplay/evoenv/compare.json",
        kind="compare",
        setting="evoenv",
        doc="results.md",
        steps=30,
        primary={"evoenv": "evoenv"},
    ),
    dict(
        path=R + "prompt_policy/base.json",
        kind="prompt_policy",
        setting="pp_base",
        baseline="none",
        doc="prompt_policy.md",
        primary={"prompt_policy": "prompt_policy"},
        note="the prompter sampled at T = 0.8, the default then; at 2.0, the default now, the same finals "
        "(prompt_policy/base_T2.json)",
    ),
    dict(
        path=R + "agents/codeact_fhir50.json",
        kind="codeact",
        setting="fhir50",
        doc="agents.md",
        primary={"codeact": "codeact"},
    ),
    dict(path=R + "agents/codeact_fhir.json", kind="codeact", setting="fhir86", doc="agents.md", primary={}),
    dict(
        path=R + "agents/codeact_judge_fhir50.json",
        kind="codeact",
        setting="fhir50_judge",
        doc="agents.md",
        primary={"codeact_judge": "codeact_judge"},
        note="the exact scripted judge",
    ),
    dict(
        path=R + "agents/codeact_judge_noisy_fhir50.json",
        kind="codeact",
        setting="fhir50_judge",
        doc="agents.md",
        primary={},
        note="the noisy scripted judge (20% of verdicts reversed)",
    ),
    dict(
        path=R + "populora/compare.json",
        kind="populora",
        setting="azr_pop",
        baseline="azr",
        doc="selfplay.md",
        primary={"populora": "populora"},
    ),
    dict(
        path=R + "populora/compare_lr5e-4.json",
        kind="populora",
        setting="azr_pop",
        baseline="azr",
        doc="selfplay.md",
        primary={},
        note="--lr 5e-4 for both sides (ten times the recipes' 5e-5)",
    ),
    dict(
        path=R + "recipe_health/populora.json",
        kind="compare",
        setting="shipped_other_task",
        doc="health.md",
        primary={},
        tests=False,
        note="a health check from the shipped base, which writes nothing in AZR's format",
    ),
    dict(
        path=R + "task_methods/tempo/compare.json",
        kind="compare",
        setting="temporal",
        doc="tasks.md",
        diagnostics=R + "task_methods/tempo/diagnostics.json",
        primary={"tempo": "tempo"},
    ),
    dict(
        path=R + "task_methods/sspo/compare.json",
        kind="compare",
        setting="diagnosis",
        doc="tasks.md",
        diagnostics=R + "task_methods/sspo/diagnostics.json",
        primary={"sspo": "sspo"},
    ),
    dict(
        path=R + "task_methods/sapo/compare.json",
        kind="compare",
        setting="recommend",
        doc="tasks.md",
        diagnostics=R + "task_methods/sapo/diagnostics.json",
        primary={"sapo": "sapo"},
    ),
    dict(
        path=R + "task_methods/sapo_lr2e-4/compare.json",
        kind="compare",
        setting="recommend_lr",
        doc="tasks.md",
        diagnostics=R + "task_methods/sapo_lr2e-4/diagnostics.json",
        primary={},
    ),
    dict(
        path=R + "task_methods/sapo_soft_base/compare.json",
        kind="compare",
        setting="recommend_soft",
        doc="tasks.md",
        diagnostics=R + "task_methods/sapo_soft_base/diagnostics.json",
        primary={},
    ),
    dict(
        path=R + "task_methods/codethinker/compare.json",
        kind="compare",
        setting="code",
        doc="tasks.md",
        diagnostics=R + "task_methods/codethinker/diagnostics.json",
        primary={"codethinker": "codethinker"},
    ),
    dict(
        path=R + "task_methods/vspo/compare.json",
        kind="compare",
        setting="spaced",
        doc="tasks.md",
        baseline="vspo:steering=null",
        primary={"vspo": "vspo"},
    ),
    dict(
        path=R + "compare_physics_30steps/compare.json",
        kind="compare",
        setting="multipart",
        doc="physics.md",
        baseline="gspo",
        primary={"physics_r1": "physics_r1"},
    ),
    dict(
        path=R + "compare_physics/compare.json",
        kind="compare",
        setting="multipart",
        doc="physics.md",
        baseline="gspo",
        primary={},
    ),
    dict(
        path=R + "real_model/recipes.json",
        kind="real_model",
        setting="smollm2",
        doc="models-and-data.md",
        primary={},
        tests=False,
    ),
]
DEDICATED = {  # recipes with a benchmark of their own (docs/results.md), beside the generic recipe_health command
    "azr": "bash benchmarks/learning/selfplay_compare.sh azr 30",
    "evoenv": "bash benchmarks/learning/selfplay_compare.sh evoenv 30",
    "populora": "python benchmarks/learning/populora_compare.py --model runs/selfplay/bases/azr --steps 30 "
    "--seeds 0,1,2",
    "prompt_policy": "python benchmarks/learning/prompt_policy_bench.py --steps 30",
    "trafl": "python benchmarks/learning/distmatch.py --group diffusion",
    "diffu_grpo": "python benchmarks/learning/distmatch.py --group diffusion",
    "codeact_judge": "python benchmarks/learning/codeact_fhir.py --recipe codeact_judge --base runs/fhir_base50 "
    "rewards.judge.backend=benchmarks/judges/fhir_rule_judge.py:judge",
}
FIELDS = tuple(FIELDS_BY_NAME.values())  # an entry's numbers, by the short names the rows below use


def read_source(src: dict, root: Path = ROOT) -> dict | None:
    """One source's entries, each with FIELDS (None where the result file has nothing), from its measurement
    (measurements.py: the one format every source is converted into), or None if the measurement is missing."""
    path = root / measurement_path(src["path"])
    if not path.exists():
        return None
    entries, first, steps = read_measurement(path, src["path"])
    return {"entries": entries, "first": first, "steps": steps}


def against_baseline(read: dict, entry: str, baseline: str, tests: bool = True) -> dict:
    """Welch p, the paired test and the s/step ratio of `entry` against `baseline` from what the JSON holds;
    no test where the source says the two trained on different tasks (`tests=False`)."""
    rows, first = read["entries"], read["first"]
    row, base = rows[entry], rows.get(baseline, {})
    p, paired = None, None
    if tests and entry != baseline and baseline == first:
        p, paired = row["p"], row["paired"]
    elif tests and entry == first and base:  # the JSON's reference is this recipe: the baseline's test, turned round
        p, b = base.get("p"), base.get("paired")
        paired = b and {
            "diff": -b["diff"],
            "low": None if b["high"] is None else -b["high"],
            "high": None if b["low"] is None else -b["low"],
            "mcnemar_p": b["mcnemar_p"],
        }
    s_x = row["s_x"] if baseline == first and entry != baseline else None
    if s_x is None and entry != baseline and row["s_step"] and base.get("s_step"):
        s_x = row["s_step"] / base["s_step"]
    return {"welch_p": p, "paired": paired, "s_per_step_x": s_x}


def make_row(recipe: str, entry: str, src: dict, read: dict) -> dict:
    """One table row: the entry's numbers, its baseline's pass@1 and s/step, and where they come from."""
    row, baseline = read["entries"][entry], src.get("baseline", "grpo")
    base = read["entries"].get(baseline, {}) if entry != baseline else {}
    return {
        "recipe": recipe,
        "entry": entry,
        "measured": row["mean"] is not None,
        "source": src["path"],
        "setting": src["setting"],
        "doc": "docs/" + src["doc"],
        "steps": read["steps"],
        "seeds": row["seeds"],
        "per_seed": row["per_seed"],
        "pass1_mean": row["mean"],
        "pass1_std": row["std"],
        "baseline": baseline if entry != baseline else None,
        "baseline_pass1_mean": base.get("mean"),
        "baseline_pass1_std": base.get("std"),
        "eval_truncation": row["trunc"],
        "eval_format": row["fmt"],
        "eval_mean_length": row["length"],
        "s_per_step": row["s_step"],
        "baseline_s_per_step": base.get("s_step"),
        **against_baseline(read, entry, baseline, src.get("tests", True)),
        "note": src.get("note"),
    }


def measure_command(recipe: str) -> str:
    return (
        f"python benchmarks/learning/recipe_health.py --recipes grpo,{recipe} --seeds 3 --steps 60 "
        f"--out runs/health/{recipe} --json benchmarks/results/recipe_health/{recipe}.json"
    )


def recipe_order() -> list[str]:
    """Every registered recipe, in the README's recipe table order (docs_tables: by doc page)."""
    from reasonrl.docs_tables import ordered_recipes
    from reasonrl.recipes import RECIPES

    return [r.name for r in ordered_recipes(RECIPES)]


def build(recipes: list[str], sources: list[dict] = SOURCES, root: Path = ROOT) -> dict:
    """The whole table: a main row per recipe (its primary source), the other rows, the recipes not measured."""
    main, other, missing = {}, [], []
    for src in sources:
        read = read_source(src, root)
        if read is None:
            missing.append(src["path"])
            continue
        by_entry = {e: r for r, e in src["primary"].items()}
        for entry in read["entries"]:
            recipe = by_entry.get(entry, entry.split(":")[0])
            if recipe not in recipes or (entry == src.get("baseline", "grpo") and entry not in by_entry):
                continue
            row = make_row(recipe, entry, src, read)
            if entry in by_entry:
                if recipe in main:
                    raise ValueError(f"{recipe} has two primary sources: {main[recipe]['source']}, {src['path']}")
                main[recipe] = row
            else:
                other.append(row)
    rows = [main.get(r) or {"recipe": r, "measured": False} for r in recipes]
    for r in rows:
        if not r["measured"]:
            r.update(command=measure_command(r["recipe"]), dedicated=DEDICATED.get(r["recipe"]))
    other.sort(key=lambda r: recipes.index(r["recipe"]))
    return {
        "command": "python benchmarks/learning/health_table.py",
        "recipes": len(recipes),
        "measured": sum(1 for r in rows if r["measured"]),
        "missing_sources": missing,
        "settings": SETTINGS,
        "rows": rows,
        "other": other,
    }


def _f(v, spec: str = ".3f") -> str:
    return "" if v is None else format(v, spec)


def cells(r: dict) -> list[str]:
    """A measured row's printed cells."""
    if not r.get("measured") and "source" not in r:
        return [r["recipe"], "not measured"] + [""] * 9
    acc = "" if r["pass1_mean"] is None else f"{r['pass1_mean']:.3f} ± {_f(r['pass1_std'])}"
    base = (
        ""
        if r["baseline_pass1_mean"] is None
        else f"{r['baseline']} {r['baseline_pass1_mean']:.3f} ± {_f(r['baseline_pass1_std'])}"
    )
    pd = r["paired"]
    paired = "" if not pd else f"{pd['diff']:+.3f} [{_f(pd['low'], '+.3f')}, {_f(pd['high'], '+.3f')}]"
    sec = _f(r["s_per_step"], ".2f") + (f" ({r['s_per_step_x']:.2f}x)" if r["s_per_step_x"] is not None else "")
    short = re.sub(r"=/[^:]*/", "=", r["entry"])  # a file option by its name only
    entry = r["recipe"] if short == r["recipe"] else f"{r['recipe']} ({short.split(':', 1)[1]})"
    return [
        entry,
        acc,
        f"{r['seeds']} x {r['steps']}",
        base,
        _f(r["welch_p"], ".2g"),
        paired,
        _f(r["eval_truncation"]),
        _f(r["eval_format"], ".2f"),
        _f(r["eval_mean_length"], ".1f"),
        sec,
        f"{r['setting']}: `{r['source'].removeprefix(R)}`",
    ]


HEAD = [
    "recipe",
    "pass@1",
    "seeds x steps",
    "baseline pass@1",
    "Welch p",
    "paired diff [95% CI]",
    "trunc",
    "format",
    "len",
    "s/step (x base)",
    "setting: source",
]


def markdown(table: dict) -> str:
    """The main table, the other measurements, the settings and the recipes not measured, as markdown."""

    def md(rows):
        lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
        return "\n".join(lines + ["| " + " | ".join(c.replace("|", "\\|") for c in cells(r)) + " |" for r in rows])

    out = [
        f"{table['measured']} of {table['recipes']} recipes measured.\n",
        md(table["rows"]),
        "\nOther measurements (ablations, earlier defaults, other settings):\n",
        md(table["other"]),
        "\nSettings:\n",
        "| setting | what it is |",
        "|---|---|",
    ]
    out += [f"| {k} | {v} |" for k, v in table["settings"].items()]
    out += ["\nNotes on sources:\n"] + [
        f"- `{s['path'].removeprefix(R)}`: {s['note']}" for s in SOURCES if s.get("note")
    ]
    unmeasured = [
        f"- `{r['recipe']}`: `{r['command']}`"
        + (f" (or its own benchmark: `{r['dedicated']}`)" if r["dedicated"] else "")
        for r in table["rows"]
        if not r["measured"]
    ]
    out += ["\nNot measured yet:\n"] + unmeasured if unmeasured else ["\nEvery recipe has a measurement."]
    if table["missing_sources"]:
        out.append("\nDeclared sources not present: " + ", ".join(f"`{p}`" for p in table["missing_sources"]))
    return "\n".join(out)


def plain(table: dict) -> str:
    widths = [22, 15, 13, 22, 7, 26, 6, 6, 5, 16, 0]
    rows = [HEAD] + [cells(r) for r in table["rows"]]
    lines = ["  ".join(c[:w].ljust(w) if w else c for c, w in zip(row, widths)) for row in rows]
    return (
        "\n".join(lines) + f"\n\n{table['measured']} of {table['recipes']} recipes measured; other rows: "
        f"{len(table['other'])} (table.json, --markdown); missing sources: {table['missing_sources'] or 'none'}"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="print markdown (docs/health.md) instead of plain text")
    ap.add_argument("--json", type=Path, default=ROOT / R / "recipe_health/table.json", help="where to write the table")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    table = build(recipe_order())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(table, indent=2) + "\n")
    print(markdown(table) if args.markdown else plain(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
