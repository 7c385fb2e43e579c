"""The loop's side of the part protocol (:mod:`reasonrl.parts.protocol`): each part's state across steps
and its per-run cache, keyed by the part's key in the recipe, checkpointed and restored as a whole.

A part's state is a plain dict the part fills (CIPO's replay ratio, SU-01's buffers, FEST's demo
cursor, VPD's beta), or, for the recipe's selector part, the object its ``build(seed)`` made (LZE's
per-prompt energies, D2Evo's pool), saved through its ``state_dict`` / ``load_state_dict``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from ..errors import UserError
from ..parts import Recipe
from ..parts.protocol import granted, part_needs

C = TypeVar("C")


class PartRuntime:
    def __init__(self, recipe: Recipe, seed: int):
        self.recipe = recipe
        self.states: dict[str, Any] = {}
        self.caches: dict[str, dict] = {}
        self.modules: dict[str, dict[str, Any]] = {}  # part key -> {name: PartModule} (setup_modules; the trainer's)
        self.needs = {key: part_needs(part) for key, part in recipe.hooked()}  # what each part declared
        found = recipe.data_selector
        self.selector_key = None if found is None else found[0]
        if found is not None:
            self.states[found[0]] = found[1].build(seed)

    def grant(self, key: str, ctx: C) -> C:
        """``ctx`` as the part ``key`` sees it: the abilities it did not declare (``protocol.ABILITIES``) None."""
        return granted(ctx, self.needs.get(key, frozenset()))

    def kind_of(self, key: str) -> int:
        """The kind a part's round gives its groups (1, 2, ... in recipe order); -1 for a part with no round."""
        return next((k for k, (name, _) in enumerate(self.recipe.rounds, start=1) if name == key), -1)

    def state(self, key: str) -> Any:
        return self.states.setdefault(key, {})

    def cache(self, key: str) -> dict:
        return self.caches.setdefault(key, {})

    def modules_of(self, key: str) -> dict[str, Any]:
        """The part's own trainable modules by name (empty for a part without ``setup_modules``)."""
        return {name: pm.module for name, pm in self.modules.get(key, {}).items()}

    def named_modules(self) -> dict[str, Any]:
        """Every part module as ``<part key>.<name>`` -> module (what checkpoints hold)."""
        return {f"{key}.{name}": pm.module for key, mods in self.modules.items() for name, pm in mods.items()}

    @property
    def selector(self) -> Any:
        """The selector part's state (admit / observe / select), or None."""
        return None if self.selector_key is None else self.states[self.selector_key]

    def state_dict(self) -> dict[str, Any]:
        """Every part state worth keeping (empty dicts are not), by part key."""
        return {
            k: v.state_dict() if hasattr(v, "state_dict") else v
            for k, v in self.states.items()
            if v or hasattr(v, "state_dict")
        }

    def load_state_dict(self, saved: dict[str, Any], known: dict[str, str] | None) -> None:
        """Restore from a checkpoint: every saved key must be a part of this recipe, and a selector's
        state must be there (and describe this run's pool: ``known``, key -> prompt digest)."""
        keys = {k for k, _ in self.recipe.hooked()}
        foreign = sorted(set(saved) - keys)
        if foreign:
            raise UserError(
                f"the checkpoint holds the state of part(s) {foreign} that recipe {self.recipe.name!r} "
                f"does not have: resume with the run's recipe"
            )
        if self.selector_key is not None and self.selector_key not in saved:
            raise UserError(
                f"the checkpoint has no state for the selector part {self.selector_key!r} of recipe "
                f"{self.recipe.name!r}: it was written by a run without it; resume with the run's recipe"
            )
        for key, value in saved.items():
            if key == self.selector_key:
                self.states[key].load_state_dict(value, known)
            else:
                self.states[key] = value

    def restore(self, checkpoint_state: dict[str, Any], known: dict[str, str] | None) -> dict[str, Any]:
        """Every part's state from a trainer checkpoint's state (a selector's per-prompt state and RNGs
        checked against this run's pool, ``known``); returns what the resume restored beyond the step."""
        st = checkpoint_state
        if "parts" not in st and (st.get("rounds") or st.get("selector")):
            raise UserError(
                "the checkpoint was written before the part protocol (its part state is in 'rounds' / "
                "'selector'): this version cannot resume it exactly; start a new run"
            )
        self.load_state_dict(st.get("parts", {}), known)
        if self.selector_key is None:
            return {}
        return {"selector_prompts": len(st["parts"][self.selector_key].get("prompts", ()))}
