"""Plain-text helpers shared by every layer (no torch, no model)."""

from __future__ import annotations

import re


def fill_slots(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` of ``values`` filled in one pass. Unlike ``str.format``, braces
    inside the values (a LaTeX answer, code), a slot name written inside a value, and any other
    ``{...}`` in the template stay as they are: model-written text never becomes a template."""
    if not values:
        return template
    slot = re.compile(r"\{(" + "|".join(re.escape(k) for k in values) + r")\}")
    return slot.sub(lambda m: values[m.group(1)], template)
