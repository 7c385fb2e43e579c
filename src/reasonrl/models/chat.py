"""Prompts as the model sees them: one formatter turns a task item's prompt into the model's input.

A prompt is a string or a list of chat messages (TRL's conversational format,
``[{"role": "system"|"user"|"assistant", "content": str}, ...]``, ending with the user's turn).
:class:`PromptFormatter` renders either to the text the tokenizer encodes as is: in ``plain`` mode a
string stays what it is; in ``chat`` mode the tokenizer's chat template renders the turns (a string
is one user turn; ``system_prompt`` adds a system turn; the generation prompt is added;
``chat_template_kwargs`` such as ``enable_thinking`` go to the template), exactly as
``tokenizer.apply_chat_template(messages, add_generation_prompt=True)`` tokenises them. ``auto``
picks ``chat`` when the tokenizer has a template and the model is a chat model (its end ids include
the template's end-of-turn token), else ``plain``.

Second rounds build their contexts through the same object (:meth:`PromptFormatter.rewrite`,
:meth:`PromptFormatter.follow_up`): for plain prompts these return today's template strings byte
for byte; for chat prompts the same text sits in templated turns.

Rendered text is a :class:`Rendered` string, and rendering it again returns it unchanged (as
``markupsafe.Markup`` marks escaped HTML), so the batch maker and the engine can render whatever a
part hands them, an item's prompt or a context already built. A rendered prompt remembers the
prompt it came from (``source``), so a rollout row's prompt can be rewritten into a teacher
context. Text derived from rendered text (a concatenation) is no longer marked: build contexts
through the formatter's methods.
"""

from __future__ import annotations

import inspect
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from jinja2.exceptions import TemplateError

from ..errors import UserError
from ..config.sections import PROMPT_FORMATS as FORMATS
from ..text import fill_slots

ROLES = ("system", "user", "assistant")
_MARK = "\x00reasonrl-turn-end\x00"  # assistant content whose rendered tail shows the end-of-turn token


class Rendered(str):
    """Text already rendered for the model: :meth:`PromptFormatter.render` returns it unchanged.
    ``source``: the prompt it was rendered from (None for a context built from several parts)."""

    source: Any = None

    @staticmethod
    def of(text: str, source: Any = None) -> "Rendered":
        out = Rendered(text)
        out.source = source  # an instance attribute: it survives pickling (Ray workers) and list copies
        return out


def is_conversational(prompt: Any) -> bool:
    return isinstance(prompt, (list, tuple))


def check_messages(prompt: Any, where: str) -> list[dict[str, str]]:
    """``prompt`` as a list of ``{"role", "content"}`` turns (a copy), or a UserError naming ``where``:
    roles in :data:`ROLES`, text content, and the user's turn last (the model answers it)."""
    if not is_conversational(prompt) or not prompt:
        raise UserError(f"{where}: a conversational prompt is a non-empty list of messages, got {prompt!r:.120}")
    out = []
    for i, m in enumerate(prompt):
        if not isinstance(m, Mapping) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise UserError(
                f'{where}: message {i} must be {{"role": one of {"|".join(ROLES)}, "content": text}}, got {m!r:.120}'
            )
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "user":
        raise UserError(f"{where}: the last message must be the user's (the model answers it), got {out[-1]['role']!r}")
    return out


def prompt_text(prompt: Any) -> str:
    """One string per prompt (keys, hashes, logs): a string as it is, messages as canonical JSON."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([dict(m) for m in prompt], ensure_ascii=False, sort_keys=True)


def user_text(prompt: Any) -> str:
    """What a string template of a second round fills ``{prompt}`` with: a string prompt itself, or
    the content of a conversation's last user turn."""
    if isinstance(prompt, str):
        return prompt
    return next(m["content"] for m in reversed(prompt) if m["role"] == "user")


def with_user_text(prompt: Any, text: str) -> Any:
    """``prompt`` with :func:`user_text` replaced by ``text`` (a string prompt becomes ``text``)."""
    if isinstance(prompt, str):
        return text
    last = max(i for i, m in enumerate(prompt) if m["role"] == "user")
    return [dict(m, content=text) if i == last else dict(m) for i, m in enumerate(prompt)]


def stop_ids(model: Any, tok: Any) -> list[int]:
    """Every id generation stops at: the model's ``generation_config.eos_token_id`` (an id or a list,
    e.g. ``<|im_end|>`` and ``<|endoftext|>``) and the tokenizer's EOS, ascending."""
    gen = getattr(model, "generation_config", None)
    ids = getattr(gen, "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    return sorted({int(i) for i in [*ids, tok.eos_token_id] if i is not None})


def context_length(model: Any) -> int | None:
    """The model's context length (``max_position_embeddings``, or the older names), None if unstated."""
    cfg = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(cfg, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def turn_end_id(tok: Any) -> int | None:
    """The special token the chat template closes an assistant turn with (``<|im_end|>``,
    ``<|eot_id|>``, ...): the first added token after an assistant message's content; None if none."""
    convo = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _MARK}]
    try:
        text = tok.apply_chat_template(convo, tokenize=False)
    except TemplateError:  # a template that refuses this conversation shows no end token: auto says so
        return None
    tail = text[text.index(_MARK) + len(_MARK) :] if _MARK in text else ""
    added = getattr(tok, "added_tokens_decoder", {}) or {}
    return next((i for i in tok(tail, add_special_tokens=False)["input_ids"] if i in added), None)


def is_chat_model(tok: Any, model: Any) -> tuple[bool, str]:
    """Whether ``auto`` renders with the chat template, and why (said in the run's notes)."""
    if not getattr(tok, "chat_template", None):
        return False, "the tokenizer has no chat template"
    end, stops = turn_end_id(tok), stop_ids(model, tok)
    if end is None:
        return False, "the chat template shows no end-of-turn token after an assistant message"
    name = tok.convert_ids_to_tokens(end)
    if end in stops:
        return True, f"the tokenizer has a chat template and the model stops at its end-of-turn token {name!r}"
    return False, (
        f"the model's end ids {stops} miss the chat template's end-of-turn token {name!r}: a base model "
        "(prompt.format=chat applies the template anyway)"
    )


@dataclass(frozen=True)
class PromptFormatter:
    """Renders prompts for one tokenizer (see the module docs). ``chat``: the template is applied;
    ``why``: how the mode was chosen. Build it with :meth:`build`; :data:`PLAIN` needs no tokenizer."""

    tok: Any = field(default=None, repr=False)
    chat: bool = False
    system_prompt: str | None = None
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    why: str = "plain prompts"
    _strip: str = ""  # text the tokenizer adds itself (a BOS), cut from the template's output

    @staticmethod
    def build(
        tok: Any,
        model: Any = None,
        format: str = "auto",
        system_prompt: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> "PromptFormatter":
        """The formatter for ``tok`` and ``model`` under the ``prompt.*`` settings; a setting that
        cannot apply (chat without a template, a system prompt on plain prompts) is a UserError."""
        if format not in FORMATS:
            raise UserError(f"prompt.format={format!r}: must be one of {', '.join(FORMATS)}")
        has_template = bool(getattr(tok, "chat_template", None))
        if format == "chat" and not has_template:
            raise UserError(
                "prompt.format=chat: the model's tokenizer has no chat template (tokenizer_config.json / "
                "chat_template.jinja); use prompt.format=plain or a model that ships one"
            )
        chat, why = (True, "prompt.format=chat") if format == "chat" else (False, "prompt.format=plain")
        if format == "auto":
            chat, why = is_chat_model(tok, model)
            why = f"auto: {why}"
        kwargs = dict(chat_template_kwargs or {})
        if not chat and (system_prompt or kwargs):
            given = "prompt.system_prompt" if system_prompt else "prompt.chat_template_kwargs"
            raise UserError(
                f"{given} needs the chat template, but prompts are plain here ({why}); set prompt.format=chat "
                f"or drop {given}"
            )
        out = PromptFormatter(tok, chat, system_prompt, kwargs, why)
        return out._checked() if chat else out

    def _checked(self) -> "PromptFormatter":
        """The template renders with the kwargs; what the tokenizer adds to every text is known."""
        try:
            self._template([{"role": "user", "content": "x"}])
        except TemplateError as err:  # the model's template, or the kwargs given to it
            raise UserError(
                f"the chat template failed with prompt.chat_template_kwargs={dict(self.template_kwargs)}: "
                f"{type(err).__name__}: {err}"
            ) from err
        bare, with_specials = (self.tok("x", add_special_tokens=s)["input_ids"] for s in (False, True))
        if with_specials[len(with_specials) - len(bare) :] != bare:  # it appends (an EOS): a prompt would end early
            raise UserError(
                f"the tokenizer appends {with_specials[-1]} to every text, so a templated prompt cannot "
                "be encoded as apply_chat_template does; use prompt.format=plain"
            )
        added = "".join(self.tok.convert_ids_to_tokens(with_specials[: len(with_specials) - len(bare)]))
        return PromptFormatter(self.tok, True, self.system_prompt, self.template_kwargs, self.why, added)

    # ------------------------------------------------------------------ rendering
    def messages(self, prompt: Any, where: str = "prompt") -> list[dict[str, str]]:
        """The turns a prompt stands for: a string is one user turn; the system prompt leads when the
        prompt has no system turn of its own (a row's own system turn wins)."""
        turns = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else check_messages(prompt, where)
        if self.system_prompt and turns[0]["role"] != "system":
            turns = [{"role": "system", "content": self.system_prompt}, *turns]
        return turns

    def _template(self, turns: list[dict[str, str]]) -> str:
        text = self.tok.apply_chat_template(turns, tokenize=False, add_generation_prompt=True, **self.template_kwargs)
        # the tokenizer adds its own BOS when it encodes; the template wrote one too: keep one
        return text[len(self._strip) :] if self._strip and text.startswith(self._strip) else text

    def render(self, prompt: Any, where: str = "prompt") -> Rendered:
        """The model's input text for ``prompt`` (a string, messages, or text already rendered)."""
        if isinstance(prompt, Rendered):
            return prompt
        if not self.chat:
            if not isinstance(prompt, str):
                raise UserError(
                    f"{where} is conversational (a list of messages) but prompts are plain here "
                    f"({self.why}); set prompt.format=chat with a model whose tokenizer has a chat template"
                )
            return Rendered.of(prompt, prompt)
        return Rendered.of(self._template(self.messages(prompt, where)), prompt)

    def render_all(self, prompts: Sequence[Any]) -> list[Rendered]:
        return [self.render(p) for p in prompts]

    def rewrite(self, prompt: Any, edit: Callable[[str], str]) -> Rendered:
        """A one-turn context made from ``prompt`` (an item's prompt, or a row's rendered prompt) by a
        string template: plain, ``edit(prompt)`` (the part's template string exactly); chat, the
        prompt's last user turn edited, then rendered."""
        prompt = self._source(prompt)
        if not self.chat:
            return self.render(edit(prompt) if isinstance(prompt, str) else prompt)
        turns = self.messages(prompt)
        return Rendered.of(self._template(with_user_text(turns, edit(user_text(turns)))))

    def follow_up(self, prompt: Any, template: str, attempt: str, **slots: str) -> Rendered:
        """A context that shows an earlier attempt: plain, ``template`` with ``{prompt}``, ``{attempt}``
        and ``slots`` filled in one pass (:func:`reasonrl.text.fill_slots`, as the parts always did);
        chat, the prompt's turns, ``attempt`` as the assistant's turn, then a user turn holding the
        template's text after ``{attempt}`` (its ``{prompt}``: the last user turn's text)."""
        prompt = self._source(prompt)
        if not self.chat:
            if not isinstance(prompt, str):
                return self.render(prompt)  # raises: a conversational prompt needs the chat template
            return Rendered.of(fill_slots(template, prompt=prompt, attempt=attempt, **slots))
        turns = self.messages(prompt)
        after = template.split("{attempt}", 1)[1] if "{attempt}" in template else template
        reply = fill_slots(after, prompt=user_text(turns), **slots).strip()
        if not reply:
            raise UserError(
                f"template {template!r} has no text after {{attempt}}: with the chat template that text "
                "is the user's next turn; add an instruction after {attempt}"
            )
        return Rendered.of(
            self._template([*turns, {"role": "assistant", "content": attempt}, {"role": "user", "content": reply}])
        )

    def _source(self, prompt: Any) -> Any:
        """What a context is built from: the prompt itself, or (chat) the prompt a rendered one came from."""
        if not (self.chat and isinstance(prompt, Rendered)):
            return prompt
        if prompt.source is None:
            raise TypeError(
                "a context is built from a prompt (an item's, or a rollout row's), not from a context "
                "the formatter composed"
            )
        return prompt.source

    def n_tokens(self, prompt: Any) -> int:
        """Tokens of the rendered prompt as the engine encodes it."""
        return len(self.tok(self.render(prompt))["input_ids"])


PLAIN = PromptFormatter()  # strings as they are; what a run without a tokenizer (tests, fakes) renders with


def cache_kwarg(model) -> str:
    """transformers >= 5.2x names the KV-cache argument ``cache``; older releases ``past_key_values``.
    A peft model's forward takes ``**kwargs`` and passes them on: its base model's forward decides."""
    forward = model.get_base_model().forward if hasattr(model, "get_base_model") else model.forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"
