"""Short environment modules the tiny model can read and write (EvoEnv on a 512-position character
model; spec envs-selfplay-eval.md section 2 [inferred for the tiny world]).

The ten seed environments (:mod:`.env_seeds`) are what a real model conditions on; their code is too long
for the tiny model's context. This grammar gives a family of short ones it can learn to write in the
warm start, each a list of digits and one expression over it, named by the expression (the default
prompt shows the name, so the solver reads what to compute)::

    class E(Env):
      name = "sum(xs)%7"
      def sample(self, s, d):
        return R(s).choices(range(10), k=3 + d)
      def reference(self, xs):
        return sum(xs)%7

Executing the expression is easy as code and hard in words, the first of EvoEnv's asymmetries. Not
every expression makes a good environment (``min(xs)`` of many digits is almost always 0): that is
what validation and calibration are for, as for anything the generator writes.
"""

from __future__ import annotations

import random

__all__ = ["CATALOGUE", "EXPRESSIONS", "grammar_env", "mismatched", "sample_env"]

# (expression over xs, whether a modulus may follow): the atoms the generator composes
EXPRESSIONS = (
    ("sum(xs)", True),
    ("max(xs)", False),
    ("len(set(xs))", False),
    ("xs[0]+xs[-1]", True),
    ("max(xs)-min(xs)", False),
    ("sum(x>{k} for x in xs)", False),
    ("sum(x%2 for x in xs)", False),
    ("sum(a<b for a,b in zip(xs,xs[1:]))", False),
    ("sum(x*x for x in xs)", True),
    ("sum(xs[::2])", True),
    ("xs[0]*xs[-1]", True),
    ("sum(xs)-max(xs)", True),
)


def grammar_env(expr: str, digits: int = 10, base: int = 3) -> str:
    """The module of one grammar environment: ``base + difficulty`` digits below ``digits``, ``expr``."""
    return (
        f'class E(Env):\n  name = "{expr}"\n  def sample(self, s, d):\n'
        f"    return R(s).choices(range({digits}), k={base} + d)\n"
        f"  def reference(self, xs):\n    return {expr}\n"
    )


def sample_env(rng: random.Random) -> str:
    """A random grammar environment: an atom (with its constant), a modulus where the atom grows."""
    atom, modular = rng.choice(EXPRESSIONS)
    expr = atom.replace("{k}", str(rng.randint(1, 8)))
    if modular and rng.random() < 0.7:
        expr = f"({expr})%{rng.randint(3, 9)}" if "+" in expr or "-" in expr else f"{expr}%{rng.randint(3, 9)}"
    return grammar_env(expr, digits=10, base=rng.randint(3, 5))


# one environment per atom (constant 4, modulus 7): with the seeds, the tiny model's starting pool and
# its held-out evaluation
CATALOGUE = tuple(
    grammar_env(expr)
    for expr in (
        "sum(xs)%7",
        "max(xs)",
        "len(set(xs))",
        "(xs[0]+xs[-1])%7",
        "max(xs)-min(xs)",
        "sum(x>4 for x in xs)",
        "sum(x%2 for x in xs)",
        "sum(a<b for a,b in zip(xs,xs[1:]))",
        "sum(x*x for x in xs)%7",
        "sum(xs[::2])%7",
        "(xs[0]*xs[-1])%7",
        "(sum(xs)-max(xs))%7",
    )
)


def mismatched(code: str, rng: random.Random) -> str:
    """A grammar environment whose reference no longer computes what its name says (another atom's
    expression): what the semantic review (L4) must answer "no" to."""
    lines = code.split("\n")
    name = lines[1].split('"')[1]
    others = [e.replace("{k}", "4") for e, _ in EXPRESSIONS if e.replace("{k}", "4") not in name]
    lines[-2] = f"    return {rng.choice(others)}"
    return "\n".join(lines)
