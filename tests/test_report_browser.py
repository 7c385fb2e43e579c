"""reasonrl report pages in a real browser: headless Chromium (Debian's ``chromium`` package) loads
the file, must log no console message (no script error, no blocked resource), renders every
section, and takes a screenshot that is a real picture. Skipped where Chromium is not installed
(CI installs it: .ci/run)."""

import shutil
import subprocess

import pytest
from matplotlib.image import imread
from report_folders import write_audit, write_compare, write_run

from reasonrl.report import write_report

from harness import COMPARE_SECTIONS, RUN_SECTIONS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run installs it)"
)


def chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    """One headless Chromium run with its log on stderr; a fresh profile per call (no lock shared
    with another test or a desktop browser); --no-sandbox since CI runs as root."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--disable-gpu",
        "--no-sandbox",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--enable-logging=stderr",
        "--v=0",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


def console_lines(stderr: str) -> list[str]:
    """What the page logged to the console: Chromium prints each message as ``...:CONSOLE:<line>] "..."``
    (a script error, a resource the Content-Security-Policy refused)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


def check_page(tmp_path, page, sections) -> None:
    shot = tmp_path / "shot.png"
    res = chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri())
    assert shot.is_file(), res.stderr[-2000:]
    assert console_lines(res.stderr) == []
    pixels = imread(shot)  # (2000, 1280, channels) floats in [0, 1]
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels.std() > 0.05  # text, tables and plots, not a blank page
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
    assert console_lines(dom.stderr) == []
    for anchor in sections:
        assert f'<section id="{anchor}">' in dom.stdout, anchor


def test_console_check_catches_a_blocked_resource(tmp_path):
    """The check can fail: a page under the report's CSP that asks for a network image and runs a
    script gets both refused, and each refusal is a console line."""
    from reasonrl.report.html import Raw, page

    bad = tmp_path / "bad.html"  # Raw: as if an unescaped fragment had slipped in
    bad.write_text(page("bad", "", [("x", "x", Raw('<img src="https://example.com/x.png"><script>1</script>'))]))
    res = chromium(tmp_path, "--dump-dom", bad.as_uri())
    assert len(console_lines(res.stderr)) == 2, res.stderr[-2000:]


def test_run_page_renders_in_chromium(tmp_path):
    run = write_run(tmp_path / "run")
    write_audit(run)
    check_page(tmp_path, write_report(run), RUN_SECTIONS)


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")  # scipy's Welch on [0.3, 0.3]
def test_compare_page_renders_in_chromium(tmp_path, monkeypatch):
    cmp = write_compare(tmp_path / "cmp", monkeypatch)
    check_page(tmp_path, write_report(cmp), COMPARE_SECTIONS)
