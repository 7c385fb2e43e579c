"""``reasonrl keys`` (issue 46): every run key with type, default and help; a typo's error names the closest
few and the command, in one short line."""

import json
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from reasonrl.cli import app
from reasonrl.commands.keys import field_comments, key_rows, matches
from reasonrl.config.train import split_config, valid_keys
from reasonrl.errors import UserError


@dataclass
class _Demo:
    rate: float = 0.5  # how fast: a "# inside" string is no comment
    plain: int = 3
    label: str = "a#b"  # the label
    # a comment line of its own belongs to no field
    after: bool = True


def test_the_help_is_the_comment_on_the_fields_line():
    assert field_comments(_Demo) == {"rate": 'how fast: a "# inside" string is no comment', "label": "the label"}


def test_every_key_is_listed_with_its_recipes_default():
    grpo = {r["key"]: r for r in key_rows()}
    # every key train accepts (bar the reward-option pattern and the field name of rollout.async) is listed
    assert set(valid_keys()) - set(grpo) == {"rewards.<name>.<option>", "rollout.async_"}
    assert "rollout.async" in grpo
    assert grpo["lora.r"] == {
        "key": "lora.r",
        "section": "lora",
        "type": "int",
        "default": 0,
        "help": "rank; 0: off",
        "off": False,
    }
    assert grpo["loss.clip_high"]["default"] == 0.2 and grpo["group_size"]["default"] == 8
    assert grpo["lora.dropout"]["help"] == "in [0, 1)"  # no comment at the field: its rule's range
    assert grpo["populora.teachers"]["off"] and not grpo["loss.clip_high"]["off"]
    dapo = {r["key"]: r for r in key_rows("dapo")}
    assert dapo["loss.clip_high"]["default"] == 0.28  # DAPO's clip-higher
    assert dapo["rewards.overlong.weight"]["default"] == 0.5


def test_patterns_are_substrings_or_globs():
    assert matches("loss.clip_high", "CLIP") and not matches("kl.coef", "clip")
    assert matches("loss.clip_high", "loss.*") and not matches("loss.veto.tau_lo", "loss.c*")
    assert matches("lora.r", "lora.") and not matches("populora.teachers", "lora.") and matches("populora.mu0", "lora")


def test_keys_command_lists_one_section_as_json_and_refuses_a_pattern_matching_nothing():
    done = CliRunner().invoke(app, ["keys", "lora.", "--json"])
    assert done.exit_code == 0, done.output
    assert [r["key"] for r in json.loads(done.output)] == ["lora.r", "lora.alpha", "lora.dropout", "lora.targets"]
    table = CliRunner().invoke(app, ["keys", "clip_high", "--recipe", "dapo"], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "0.28" in table.output and "loss.clip_high" in table.output
    nothing = CliRunner().invoke(app, ["keys", "no_such_key"])
    assert nothing.exit_code != 0 and "no run key matches 'no_such_key'" in str(nothing.exception)


def test_a_typo_names_the_closest_few_and_the_keys_command_in_one_short_line():
    with pytest.raises(UserError) as info:
        split_config({"optim": {"lrr": 1e-5}})
    text = str(info.value)
    assert text.startswith("unknown config key 'optim.lrr' (did you mean 'optim.lr'?); other close keys: ")
    assert "`reasonrl keys optim.` lists the optim keys" in text and "`reasonrl keys [PATTERN]`" in text
    assert "\n" not in text and len(text) < 400  # was every key: about 5,900 characters
    assert text.count("'optim.") <= 5  # the typo and at most 4 close keys
