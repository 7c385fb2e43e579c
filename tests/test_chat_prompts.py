"""Chat-formatted prompts (issue 28, item 1): one formatter renders a prompt (a string or TRL's
conversational messages) exactly as ``tokenizer.apply_chat_template(..., add_generation_prompt=True)``
does, the engine feeds those ids and stops at every end id of the model, and second rounds build
their contexts through the same formatter (for plain prompts, today's strings byte for byte)."""

import pytest
import torch

from chat_model import build_tokenizer
from helpers import round_context, text_rollouts
from reasonrl.loop.batch import Batch
from reasonrl.errors import UserError
from reasonrl.models import build_char_tokenizer, load_model
from reasonrl.models.chat import PLAIN, PromptFormatter, Rendered, is_chat_model, stop_ids
from reasonrl.parts import Correction
from reasonrl.parts.correction import DEFAULT_TEMPLATE, correction_prompt
from reasonrl.parts.nudge import HINT_TEMPLATE
from reasonrl.parts.vpd import DEFAULT_TEMPLATE as VPD_TEMPLATE, teacher_prompt
from reasonrl.rewards import UserReward
from reasonrl.rollout import HFEngine, SamplingParams
from reasonrl.tasks import Item

Q = [{"role": "user", "content": "What is 3 plus 4?"}]


@pytest.fixture(scope="module")
def chat(chat_model_dir):
    model, tok = load_model(str(chat_model_dir))
    return model, tok


def ids_of(ro, row):
    return ro.prompt_ids[row][ro.prompt_mask[row].bool()].tolist()


def test_the_engine_feeds_the_ids_apply_chat_template_gives(chat):
    model, tok = chat
    engine = HFEngine(model, tok)  # prompt.format=auto: this is a chat model (see the next test)
    ro = engine.generate([Q, "What is 1 plus 2?"], 1, SamplingParams(temperature=0, max_new_tokens=2))
    assert ids_of(ro, 0) == tok.apply_chat_template(Q, add_generation_prompt=True)["input_ids"]
    # a string prompt is one user turn
    one = [{"role": "user", "content": "What is 1 plus 2?"}]
    assert ids_of(ro, 1) == tok.apply_chat_template(one, add_generation_prompt=True)["input_ids"]
    assert isinstance(ro.prompts[0], Rendered) and ro.prompts[0].source == Q  # the rollouts keep the rendered text
    # a system prompt leads; template options pass through (Qwen3's enable_thinking=False: an empty think block)
    fmt = PromptFormatter.build(tok, model, "auto", "Be brief.", {"enable_thinking": False})
    ro = HFEngine(model, tok, formatter=fmt).generate([Q], 1, SamplingParams(temperature=0, max_new_tokens=2))
    want = tok.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, *Q], add_generation_prompt=True, enable_thinking=False
    )["input_ids"]
    assert ids_of(ro, 0) == want and tok.decode(want).endswith("<think>\n\n</think>\n\n")


def test_a_tokenizer_that_adds_its_own_bos_gets_one_bos():
    # Llama 3's way: the tokenizer prepends a BOS when it encodes and the template writes one too;
    # apply_chat_template encodes without specials, so the model sees one BOS, and so must the engine
    from tokenizers import processors
    from transformers import PreTrainedTokenizerFast

    from chat_model import TEMPLATE

    core = build_tokenizer().backend_tokenizer
    core.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)]
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tok.chat_template = "{{ bos_token }}" + TEMPLATE
    assert tok("x")["input_ids"][0] == 0 != tok("x", add_special_tokens=False)["input_ids"][0]
    ids = tok(PromptFormatter.build(tok, None, "chat").render(Q))["input_ids"]
    assert ids == tok.apply_chat_template(Q, add_generation_prompt=True)["input_ids"] and ids[:2] == [0, 1]


def test_generation_stops_at_the_chat_end_id(chat):
    model, tok = chat
    end = tok.convert_tokens_to_ids("<|im_end|>")
    # the specials come first in the trained vocabulary: <|endoftext|> 0 (the tokenizer's EOS), <|im_end|> 2
    assert (tok.eos_token_id, end) == (0, 2) and stop_ids(model, tok) == [0, 2]
    bias = torch.zeros(len(tok))
    bias[end] = 100.0  # greedy decoding now writes <|im_end|> first
    hook = model.lm_head.register_forward_hook(lambda mod, args, out: out + bias)
    try:
        engine = HFEngine(model, tok)
        ro = engine.generate([Q], 1, SamplingParams(temperature=0, max_new_tokens=5))
        assert ro.finish_reasons == ["eos"] and ro.completion_ids.tolist() == [[end]] and ro.lengths.tolist() == [1]
        assert ro.texts == [""]  # the end token is in the completion (the loss sees it), not in its text
        engine.stop_ids = torch.tensor([tok.eos_token_id])  # the tokenizer's EOS alone: the row runs to the budget
        ro = engine.generate([Q], 1, SamplingParams(temperature=0, max_new_tokens=5))
        assert ro.finish_reasons == ["length"] and ro.completion_ids.tolist() == [[end] * 5]
    finally:
        hook.remove()


def test_auto_chooses_the_template_for_a_chat_model_only(chat):
    model, tok = chat
    chat_ok, why = is_chat_model(tok, model)
    assert chat_ok and "'<|im_end|>'" in why
    base = type(model)(model.config)  # the same tokenizer under a base model: it stops at <|endoftext|> only
    base.generation_config.eos_token_id = tok.eos_token_id
    fmt = PromptFormatter.build(tok, base)
    assert not fmt.chat and "miss the chat template's end-of-turn token '<|im_end|>'" in fmt.why
    assert PromptFormatter.build(tok, base, "chat").chat  # chat asked for: applied anyway
    char = build_char_tokenizer()  # the shipped model's tokenizer has no template
    assert PromptFormatter.build(char, None).why == "auto: the tokenizer has no chat template"
    with pytest.raises(UserError, match="prompt.format=chat: the model's tokenizer has no chat template"):
        PromptFormatter.build(char, None, "chat")
    with pytest.raises(UserError, match="prompt.system_prompt needs the chat template"):
        PromptFormatter.build(char, None, "auto", system_prompt="hi")
    with pytest.raises(UserError, match="prompt.format=chat with a model whose tokenizer has a chat template"):
        fmt.render(Q)  # a conversation on plain prompts: said, never flattened


def test_plain_contexts_are_the_parts_template_strings_byte_for_byte():
    p, y = "12+3=?\n", "2+3+0=5,1+0+0=1\nA:{14}"
    assert PLAIN.render(p) == p and PLAIN.render(PLAIN.render(p)) == p
    assert PLAIN.follow_up(p, DEFAULT_TEMPLATE, y) == correction_prompt(DEFAULT_TEMPLATE, p, y)
    assert PLAIN.follow_up(p, VPD_TEMPLATE, y, feedback="wrong") == teacher_prompt(VPD_TEMPLATE, p, y, "wrong")
    hinted = PLAIN.rewrite(p, lambda q: HINT_TEMPLATE.format(hint="carry the 1", prompt=q))
    assert hinted == HINT_TEMPLATE.format(hint="carry the 1", prompt=p)


def test_chat_contexts_are_templated_turns():
    tok = build_tokenizer()
    fmt = PromptFormatter.build(tok, None, "chat")
    q = Q[0]["content"]
    # a follow-up: the attempt as the assistant's turn, the template's text after {attempt} as the user's
    want = tok.apply_chat_template(
        [
            *Q,
            {"role": "assistant", "content": "I get 8"},
            {
                "role": "user",
                "content": ("The attempt above may be wrong. Find the error and give a corrected full solution.\n" + q),
            },
        ],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert fmt.follow_up(Q, DEFAULT_TEMPLATE, "I get 8") == want
    # a rewrite edits the last user turn; from a rollout row's rendered prompt it uses the prompt it came from
    row = fmt.render(Q)
    want = tok.apply_chat_template(
        [{"role": "user", "content": q + " (hint)"}], tokenize=False, add_generation_prompt=True
    )
    assert fmt.rewrite(Q, lambda t: t + " (hint)") == want == fmt.rewrite(row, lambda t: t + " (hint)")
    assert fmt.render(row) is row  # rendering is idempotent: the batch maker can render whatever a part hands it
    with pytest.raises(TypeError, match="not from a context the formatter composed"):
        fmt.rewrite(fmt.follow_up(Q, DEFAULT_TEMPLATE, "8"), str.upper)


def test_a_correction_round_on_a_chat_model_samples_templated_turns():
    tok = build_tokenizer()
    fmt = PromptFormatter.build(tok, None, "chat")
    items = [Item(key="q1", prompt=Q, answer="7")]
    texts = ["I get 8", "I get 9", "I get 8", "7"]  # accuracy 1/4: selected (p_max 0.5)
    ro = text_rollouts([fmt.render(Q)], texts, 4)
    correct = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    batch = Batch(items=items, ro=ro, rewards=correct.clone(), correct=correct)
    seen = []

    def sample(its, prompts, tag, first, n=None):
        seen.extend(prompts)
        return text_rollouts(prompts, ["7"] * 4, 4)

    def reward(its, r):
        return torch.ones(1, 4), torch.ones(1, 4), {}

    ctx = round_context(
        batch,
        task=type("T", (), {"extract_answer": staticmethod(lambda t: t[-1:])})(),
        sample=sample,
        reward=reward,
        position=1,
        group_size=4,
        formatter=fmt,
    )
    Correction(q0=0.0, rho=1.0).extend(ctx)
    failed = seen[0].split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    assert failed in {"I get 8", "I get 9"}
    assert seen == [
        tok.apply_chat_template(
            [
                *Q,
                {"role": "assistant", "content": failed},
                {
                    "role": "user",
                    "content": (
                        "The attempt above may be wrong. Find the error and give a corrected full solution.\n"
                        + Q[0]["content"]
                    ),
                },
            ],
            tokenize=False,
            add_generation_prompt=True,
        )
    ]


def test_a_reward_function_gets_messages_when_the_prompt_was_conversational(tmp_path):
    path = tmp_path / "r.py"
    path.write_text(
        "SEEN = []\ndef fn(prompts, completions, **kw):\n    SEEN.append((prompts, completions, kw))\n"
        "    return [1.0] * len(completions)\n"
    )
    reward = UserReward(f"{path}:fn")
    assert reward([Q, "plain"], ["a", "b"], answer=["7", "3"]) == [1.0, 1.0]
    prompts, completions, kw = reward.fn.__globals__["SEEN"][0]
    assert prompts == [Q, "plain"] and kw == {"answer": ["7", "3"]}
    assert completions == [[{"role": "assistant", "content": "a"}], "b"]  # TRL's contract
