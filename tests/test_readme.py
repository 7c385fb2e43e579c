"""The README's Python blocks, then docs/usage.md's, run as written (issue 46): each ```python block, in order,
in one namespace, in a fresh folder (their runs write runs/...). Slow tier: three short training runs on the
shipped base (1-2 steps)."""

import json
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
USAGE = README.parent / "docs" / "usage.md"  # the parts underneath, moved there from the README


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_the_block_finder_takes_python_blocks_only():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = 2\nz = 3\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = 2\nz = 3\n"]


@pytest.mark.slow
def test_readmes_python_blocks_run_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(README.read_text()) + python_blocks(USAGE.read_text())
    assert len(blocks) >= 4 and "reasonrl.train(" in blocks[0]
    scope: dict = {"__name__": "__readme__"}
    for i, block in enumerate(blocks):
        exec(compile(block, f"README.md python block {i + 1}", "exec"), scope)
    first = json.loads((tmp_path / "runs/py-grpo/metrics.jsonl").read_text().splitlines()[0])
    # the README's weights: reward = 1.0 x correct + 0.2 x brief, per completion, so also in the step's means
    assert first["reward/mean"] == pytest.approx(first["reward/correct/mean"] + 0.2 * first["reward/brief/mean"])
    assert "reward/brief/std" in first
    for run in ("py-grpo", "py-dapo", "py-mine"):
        assert (tmp_path / "runs" / run / "summary.json").exists()
    assert (tmp_path / "runs/py-dapo/start_model/config.json").exists()  # the loaded model, saved for the run
