"""LaTeX answers to plain text and numbers (Physics-R1's answer matching, spec section 7(b)).

The Physics-R1 reward compares numbers "after converting LaTeX to plain text (``\\frac`` -> ``/``,
``\\times`` -> ``*``, and so on)". This module does that conversion and nothing else; no torch.

* :func:`latex_to_text` -- ``\\frac{a}{b}`` / ``\\dfrac`` / ``\\tfrac`` -> ``(a)/(b)``, ``\\times`` and
  ``\\cdot`` -> ``*``, ``^{n}`` -> ``**(n)``, ``\\sqrt{x}`` -> ``sqrt(x)``, ``\\pi`` -> ``pi``;
  ``\\left`` / ``\\right``, math delimiters, ``\\boxed{..}`` wrappers and spacing commands dropped; ``\\text{..}`` /
  ``\\mathrm{..}`` kept as their content, or dropped with ``units=False`` (they hold units).
* :func:`split_unit` -- a leading number expression and the unit text after it
  (``"3 \\times 10^{8} m/s"`` -> ``("3 * 10**(8)", "m/s")``).
* :func:`parse_quantity` -- the value of an answer, units stripped, or ``None``: decimals,
  thousands separators (``1,234``), scientific notation (``1e-3``, ``3 \\times 10^{8}``), fractions,
  ``pi``, ``sqrt``, evaluated by a whitelist over Python's ``ast`` (never ``eval``).
* :func:`numbers_close` -- ``|pred - gold| <= atol + rtol * |gold|`` (numpy's ``isclose`` form, the
  tolerance relative to the gold).

[inferred] choices (the spec lists the conversion by example only): a comma between digits is
a thousands separator only in groups of exactly three (``1,5`` is not a number); ``%`` is a unit
(``50\\%`` reads 50); a leading ``x =`` (one symbol and an equals sign) is dropped; leading zeros are
read away (``007`` is 7); implicit products (``2\\sqrt{2}``, ``2(3)``) are not numbers.
"""

from __future__ import annotations

import ast
import math
import operator
import re

from .answers import matching_brace  # one brace counter for every \boxed / \frac reader

__all__ = ["latex_to_text", "split_unit", "parse_quantity", "numbers_close", "matching_brace"]

_MAX_EXPONENT = 400  # 10**400 overflows a float anyway; refuse before Python builds a huge int
_SPACING = re.compile(r"\\[,;:! ]|\\quad|\\qquad|~")
_DELIMS = re.compile(r"\$|\\\(|\\\)|\\\[|\\\]|\\left|\\right|\\displaystyle")
_TEXT_CMDS = ("\\text", "\\mathrm", "\\textrm", "\\mathbf", "\\operatorname", "\\rm", "\\mbox")
_SYMBOLS = {
    "\\times": "*",
    "\\cdot": "*",
    "\\ast": "*",
    "\\div": "/",
    "\\pi": "pi",
    "\\%": "%",
    "\\degree": "deg",
    "^\\circ": "deg",
    "\\circ": "deg",
    "\u2212": "-",
    "\u00d7": "*",
    "\u00b7": "*",
}
_GROUPED = re.compile(r"(?<![\d.])(\d{1,3})((?:,\d{3})+)(?![\d,])")
_LEADING_ZEROS = re.compile(r"(?<![\d.])0+(?=\d)")  # "007" is 7 (Python's parser refuses leading zeros)
_ASSIGN = re.compile(r"^\s*[A-Za-z](?:_\{?\w+\}?)?\s*=\s*")
# a number expression: numbers (with exponents), pi, sqrt(, operators, parentheses and spaces
_NUMBER = r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?"
_EXPR_TOKEN = re.compile(rf"\s*(?:{_NUMBER}|pi(?![A-Za-z])|sqrt\(|\*\*|[-+*/()])")
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def _group(text: str, at: int) -> tuple[str, int] | None:
    """The brace group (or single character) starting at ``at`` (spaces skipped): content and end."""
    while at < len(text) and text[at] == " ":
        at += 1
    if at >= len(text):
        return None
    if text[at] != "{":
        return text[at], at + 1
    close = matching_brace(text, at)
    return None if close is None else (text[at + 1 : close], close + 1)


def _replace_command(text: str, cmd: str, n_args: int, build) -> str:
    """Replace every ``cmd{a}..`` (``n_args`` brace groups, nested braces allowed) by ``build(*args)``."""
    out, i = [], 0
    pattern = re.compile(re.escape(cmd) + r"(?![A-Za-z])")
    while (m := pattern.search(text, i)) is not None:
        args, end = [], m.end()
        for _ in range(n_args):
            got = _group(text, end)
            if got is None:
                break
            args.append(got[0])
            end = got[1]
        if len(args) < n_args:  # unbalanced: leave the rest as it is
            break
        out.append(text[i : m.start()] + build(*args))
        i = end
    return "".join(out) + text[i:]


def latex_to_text(latex: str, units: bool = True) -> str:
    """Plain text of a LaTeX answer (module docstring); ``units=False`` drops ``\\text{..}``-like groups."""
    text = _replace_command(_DELIMS.sub(" ", str(latex)), "\\boxed", 1, lambda a: f" {a} ")
    for cmd in _TEXT_CMDS:
        text = _replace_command(text, cmd, 1, (lambda a: f" {a} ") if units else (lambda a: " "))
    for cmd in ("\\dfrac", "\\tfrac", "\\frac"):
        while cmd in text:  # nested fractions: the inner ones are rebuilt by the next pass
            new = _replace_command(text, cmd, 2, lambda a, b: f"(({a})/({b}))")
            if new == text:
                break
            text = new
    text = _replace_command(text, "\\sqrt", 1, lambda a: f"sqrt({a})")
    for sym, plain in _SYMBOLS.items():
        text = text.replace(sym, f" {plain} " if plain.isalpha() else plain)
    text = _SPACING.sub(" ", text)
    text = _replace_command(text, "^", 1, lambda a: f"**({a})")
    text = text.replace("{", "(").replace("}", ")").replace("\\", "")
    return " ".join(text.split())


def _remove_thousands(text: str) -> str:
    return _GROUPED.sub(lambda m: m.group(1) + m.group(2).replace(",", ""), text)


def split_unit(text: str) -> tuple[str, str]:
    """(number expression, unit) of plain text: the longest prefix of expression tokens, then the rest."""
    end, depth, last_ok = 0, 0, 0
    while (m := _EXPR_TOKEN.match(text, end)) is not None and m.end() > end:
        tok = m.group().strip()
        depth += tok.endswith("(") - (tok == ")")
        if depth < 0:
            break
        end = m.end()
        if depth == 0 and tok not in "+-*/**":
            last_ok = end  # the expression may end here: balanced, not after an operator
    return text[:last_ok].strip(), text[last_ok:].strip()


def _eval(node: ast.AST) -> float:
    """Value of a whitelisted arithmetic AST (ValueError for anything else)."""
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Name) and node.id == "pi":
        return math.pi
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) * math.log10(max(abs(left), 2.0)) > _MAX_EXPONENT:
            raise ValueError("exponent too large")
        return float(_OPS[type(node.op)](left, right))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "sqrt"
        and len(node.args) == 1
        and not node.keywords
    ):
        return math.sqrt(_eval(node.args[0]))
    raise ValueError(f"not a number expression: {type(node).__name__}")


def parse_quantity(answer: str) -> float | None:
    """The numeric value of an answer (LaTeX or plain), units stripped; ``None`` if it has none.

    ``\\frac{1}{2}`` -> 0.5, ``3.0 \\times 10^{8}\\,\\text{m/s}`` -> 3e8, ``1,234 kg`` -> 1234,
    ``v = 2.5e-3`` -> 0.0025. The unit must start with a letter, ``%``, or ``deg``: ``3 4`` is not
    a number, and neither is a bare unit.
    """
    text = _ASSIGN.sub("", latex_to_text(answer, units=False))
    expr, unit = split_unit(_LEADING_ZEROS.sub("", _remove_thousands(text)).replace("^", "**"))
    if not expr or (unit and not re.match(r"[A-Za-z%\u00b5\u03bc\u03a9]", unit)):
        return None
    try:
        value = _eval(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError):
        return None
    return value if math.isfinite(value) else None


def numbers_close(pred: float, gold: float, rtol: float = 1e-2, atol: float = 1e-6) -> bool:
    """``|pred - gold| <= atol + rtol * |gold|``: Physics-R1's rtol 1e-2 / atol 1e-6 (spec 7(b))."""
    return abs(pred - gold) <= atol + rtol * abs(gold)
