"""The sandbox's limit checks, limit by limit, at their boundaries (issue 45: mutation survivors of
``rewards/sandbox/limits.py``: every check of ``Limits.__post_init__`` had no test of its own).

Pure data checks: no sandbox is started, so this file runs in well under a second.
"""

from __future__ import annotations

import math

import pytest

from reasonrl.rewards.sandbox.limits import LIMIT_NAMES, Limits, classify, make_limits

# (limit, its floor): a value must be > floor. memory_mb > 31 (the bootstrap interpreter maps ~15 MB),
# max_files > 7 (stdio plus the interpreter's own descriptors), every other limit > 0.
FLOORS = [
    ("timeout", 0),
    ("memory_mb", 31),
    ("cpu_seconds", 0),
    ("max_procs", 0),
    ("max_files", 7),
    ("max_file_mb", 0),
    ("disk_mb", 0),
    ("max_output_bytes", 0),
    ("grace", 0),
]


def test_every_numeric_limit_is_listed_here():
    # a limit added to Limits without a boundary test below fails here
    assert {name for name, _ in FLOORS} | {"site_packages"} == set(LIMIT_NAMES)


@pytest.mark.parametrize("name,floor", FLOORS)
def test_a_limit_at_its_floor_is_refused_and_just_above_it_kept(name, floor):
    with pytest.raises(ValueError) as err:
        Limits(**{name: floor})
    # the one line names the limit, the value given and the bound
    assert str(err.value) == f"sandbox limit {name}={floor!r} must be a finite number > {floor}"
    above = floor + 1  # an int: 1, 32, 8
    assert getattr(Limits(**{name: above}), name) == above
    assert getattr(Limits(**{name: floor + 0.5}), name) == floor + 0.5  # floats are numbers too


@pytest.mark.parametrize("name,floor", FLOORS)
@pytest.mark.parametrize("bad", [-1, math.inf, -math.inf, math.nan, True, False, "2", None])
def test_a_limit_that_is_not_a_finite_number_above_its_floor_is_refused(name, floor, bad):
    if bad is None and name == "cpu_seconds":
        assert Limits(cpu_seconds=None).cpu_seconds is None  # None: "derive it from the timeout"
        return
    with pytest.raises(ValueError, match=rf"^sandbox limit {name}=.* must be a finite number > "):
        Limits(**{name: bad})


def test_booleans_are_not_numbers_even_above_the_floor():
    # True == 1 > 0 would pass the comparison: only the explicit bool check refuses it
    for name in ("timeout", "max_procs", "max_file_mb", "disk_mb", "max_output_bytes", "grace", "cpu_seconds"):
        with pytest.raises(ValueError, match=f"{name}=True"):
            Limits(**{name: True})


def test_site_packages_must_be_a_bool():
    assert Limits(site_packages=True).site_packages is True
    for bad in (1, "yes", None):
        with pytest.raises(ValueError, match=rf"^sandbox limit site_packages={bad!r} must be a bool$"):
            Limits(site_packages=bad)


def test_defaults_and_cpu_limit_by_hand():
    lim = Limits()
    # the 2 s and 256 MB; the rest as documented in Limits
    assert (lim.timeout, lim.memory_mb, lim.cpu_seconds, lim.max_procs, lim.max_files) == (2.0, 256, None, 16, 64)
    assert (lim.max_file_mb, lim.disk_mb, lim.max_output_bytes, lim.site_packages, lim.grace) == (
        16,
        64,
        65536,
        False,
        5.0,
    )
    assert lim.cpu_limit == 3  # ceil(2.0 + 1)
    assert Limits(timeout=2.5).cpu_limit == 4  # ceil(3.5): the wall time plus one second, rounded up
    assert Limits(timeout=9.0, cpu_seconds=2.2).cpu_limit == 3  # an explicit cpu_seconds wins: ceil(2.2)
    assert Limits(cpu_seconds=4).cpu_limit == 4  # ceil(4) stays 4


def test_make_limits_passes_known_options_and_names_unknown_ones_sorted():
    assert make_limits(timeout=3.0, memory_mb=64) == Limits(timeout=3.0, memory_mb=64)
    assert make_limits() == Limits()
    with pytest.raises(ValueError) as err:
        make_limits(zeta=1, alpha=2, timeout=1.0)
    assert str(err.value) == f"unknown sandbox option(s) alpha, zeta; valid: {', '.join(LIMIT_NAMES)}"


def test_a_late_clean_exit_is_a_timeout_without_a_signal():
    # the runner saw the wall clock pass, but the program exited 0 on its own: status timeout, and no signal
    # killed it (signal None, not 0: only a negative return code -N means "killed by signal N")
    assert classify(0, True, "") == ("timeout", None)
    assert classify(2, True, "MemoryError") == ("timeout", None)  # the deadline decides before the stderr tail
