"""The figures docs/ cites from benchmarks/results/ match the stored JSON (issue 45 item 3), for the tables and
paragraphs that name their file: each cell is recomputed from the JSON and formatted to the doc's precision."""

import json
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _table(doc: str, after: str) -> list[list[str]]:
    """The cells of the first markdown table from the line holding ``after`` on (header and rule dropped)."""
    lines = (ROOT / "docs" / doc).read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    rows, seen = [], False
    for line in lines[start:]:
        if line.startswith("|"):
            seen = True
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif seen:
            break
    return rows[2:]


def test_distmatch_disa_ess_table_is_disa_ess_json():
    results = json.loads((RESULTS / "distmatch" / "disa_ess.json").read_text())["results"]
    by = {(r["proposal"], r["beta"]): r for r in results}
    rows = _table("distmatch.md", "benchmarks/results/distmatch/disa_ess.json`):")
    assert len(rows) == 7
    for cells in rows:
        r = by[(cells[0], float(cells[1]))]
        ref = by[("reference", float(cells[1]))]
        shift = statistics.mean(abs(a - b) for a, b in zip(r["log_z"], ref["log_z"]))
        want = [
            f"{r['reward_mean']:.3f}",
            f"{r['log_z_mean']:.2f} ({r['log_z_std']:.2f})",
            f"{r['ess_mean']:.2f} ({r['ess_min']:.2f})",
            f"{r['ess_tilted_mean']:.2f} ({r['ess_tilted_min']:.2f})",
            "0" if cells[0] == "reference" else f"{shift:.2f}",
        ]
        assert cells[2:] == want, cells


@pytest.mark.parametrize(
    "label,file,speed_key",
    [
        ("none (`codeact`, the table above)", "codeact_fhir50.json", "codeact_s_per_step"),
        ("exact (`judge`)", "codeact_judge_fhir50.json", "agent_s_per_step"),
        ("20% reversed (`noisy_judge`)", "codeact_judge_noisy_fhir50.json", "agent_s_per_step"),
    ],
)
def test_agents_judge_table_is_the_codeact_json(label, file, speed_key):
    data = json.loads((RESULTS / "agents" / file).read_text())
    rows = {c[0]: c for c in _table("agents.md", "| judge | seed 0 | seed 1 | seed 2 |")}
    cells, seeds, s = rows[label], data["seeds"], data["summary"]
    assert cells[1:4] == [f"{seeds[k]['after']:.3f}" for k in ("0", "1", "2")]
    assert cells[4] == f"{s['after_mean']:.3f} ± {s['after_std']:.3f}"
    if "reward/judge/mean" in seeds["0"]:
        assert cells[5] == ", ".join(
            f"{seeds[k]['reward/judge/mean']:.3f} / {seeds[k]['accuracy']:.3f}" for k in ("0", "1", "2")
        )
    assert cells[7].startswith(f"{s[speed_key]:.1f} ")


def test_results_evoenv_generator_figures_are_selfplay_json():
    e = json.loads((RESULTS / "selfplay" / "evoenv" / "selfplay.json").read_text())["evoenv"]
    text = " ".join((ROOT / "docs" / "results.md").read_text().split())

    def mean(key, end):  # the 3 seeds' mean
        return statistics.mean(e[f"evoenv/{key} ({end})"])

    for key, what in [
        ("admitted", "admitted"),
        ("rejected_novelty", "rejected as near-duplicates"),
        ("rejected_calibration", "by calibration"),
        ("rejected_degenerate", "as degenerate"),
        ("rejected_review", "by the policy's own review"),
        ("rejected_parse", "that did not parse"),
        ("rejected_run", "that failed to run"),
    ]:
        first, last = f"{mean(key, 'first'):.1f}", f"{mean(key, 'last'):.1f}".replace("0.0", "0")
        assert f"{first} -> {last} {what}" in text, (key, first, last)
    assert f"about {round(mean('admitted_total', 'last'))} in all" in text
    assert f"falls {mean('generator_reward', 'first'):.3f} -> {mean('generator_reward', 'last'):.3f}" in text
