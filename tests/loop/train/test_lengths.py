"""Length rules: the 'auto' completion cap, the truncation preflight and the truncation counts of training."""

import pytest
from transformers import AutoTokenizer

from ratchet.loop.config import ConfigError, load_config
from ratchet.loop.tasks.sources import chat_messages
from ratchet.loop.train.examples import ChatExample
from ratchet.loop.train.grpo import GRPOSample, fit_message, pack_rollouts
from ratchet.loop.train.lengths import auto_max_new_tokens, check_no_truncation, round_max_new_tokens, truncation_error
from ratchet.loop.train.sft import truncation_counts


@pytest.mark.parametrize(
    ("p90", "expected"),
    [(None, 16), (10.0, 16), (20.0, 24), (20.1, 25), (500.0, 64)],  # first round: min; 1.2 x P90 rounded up; clipped
)
def test_auto_cap_is_1_2_p90_within_bounds(p90, expected):
    assert auto_max_new_tokens(p90, 16, 64) == expected


def test_fixed_cap_ignores_history_and_auto_uses_it():
    assert round_max_new_tokens(load_config(None, **{"generation.max_new_tokens": 40}), 100.0) == 40
    auto = load_config(None, **{"generation.max_new_tokens": "auto", "generation.max_new_tokens_max": 100})
    assert round_max_new_tokens(auto, 50.0) == 60
    assert auto.generation.max_new_tokens_cap == 100  # evaluation and preflight use the maximum


def test_bad_auto_bounds_fail_in_one_line():
    with pytest.raises(ConfigError, match="max_new_tokens_min .* must be <= max_new_tokens_max"):
        load_config(None, **{"generation.max_new_tokens_min": 64, "generation.max_new_tokens_max": 32})


@pytest.mark.parametrize(
    ("algorithm", "seq", "cap", "prompt", "match"),
    [
        ("rft", 64, 32, 32, r"sft.max_seq_len \(64\) < longest prompt \(32 tokens\) \+ max_new_tokens \(32\) \+ EOS"),
        ("rft", 65, 32, 32, None),
        ("grpo", 64, 32, 32, None),
        ("grpo", 64, 40, 10, None),  # no fixed half for the completion: prompt + completion fit
        ("grpo", 64, 56, 10, r"set sft.max_seq_len >= 66"),
        ("grpo", 64, 32, 33, r"set sft.max_seq_len >= 65"),
    ],
)
def test_truncation_error_names_the_limit(algorithm, seq, cap, prompt, match):
    cfg = load_config(None, **{"algorithm": algorithm, "sft.max_seq_len": seq, "generation.max_new_tokens": cap})
    err = truncation_error(cfg, prompt)
    assert (err is None) if match is None else (err is not None and __import__("re").search(match, err))


def test_preflight_check_renders_prompts_with_the_chat_template(tiny_model_dir):
    convs = [chat_messages("sys", [], "What is 3 + 4?")]
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    n = len(tok.apply_chat_template(convs[0], tokenize=False, add_generation_prompt=True)) // 100  # a lower bound
    ok = load_config(None, **{"sft.max_seq_len": 512, "generation.max_new_tokens": 32})
    check_no_truncation(ok, tiny_model_dir, convs)
    tight = load_config(None, **{"sft.max_seq_len": 33 + n, "generation.max_new_tokens": 32})
    with pytest.raises(ConfigError, match="so training would truncate"):
        check_no_truncation(tight, tiny_model_dir, convs)


def test_sft_and_grpo_count_what_they_cut(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    short = ChatExample(chat_messages("sys", [], "What is 3 + 4?"), "Answer: 7")
    long = ChatExample(chat_messages("sys", [], "What is 3 + 4?"), "seven " * 40)
    assert truncation_counts(tok, [short], 512) == {"train/truncated_prompts": 0, "train/truncated_completions": 0}
    assert truncation_counts(tok, [short, long], 24) == {"train/truncated_prompts": 2, "train/truncated_completions": 1}
    samples = [GRPOSample(0, short, 1.0, False), GRPOSample(0, long, 0.0, True)]
    fits = pack_rollouts(tok, samples, 512)
    assert (fits.truncated_prompts, fits.truncated_completions) == (0, 0)
    plen = len(tok(tok.apply_chat_template(short.messages, tokenize=False, add_generation_prompt=True))["input_ids"])
    cut = pack_rollouts(tok, samples, plen + 10)  # the prompt stays whole, the long completion keeps its first 10 tokens
    assert (cut.truncated_prompts, cut.truncated_completions) == (0, 1)
    assert [len(c) for c in cut.completions] == [len(fits.completions[0]), 10]
    assert cut.longest_sequence == plen + len(fits.completions[1])
    msg = fit_message(cut, 2, plen + 10)
    assert f"set sft.max_seq_len >= {plen + len(fits.completions[1])}" in msg and "\n" not in msg
    no_room = pack_rollouts(tok, samples, plen)  # a prompt that alone fills max_seq_len is cut on the left instead
    assert no_room.truncated_prompts == 2 and all(len(c) <= plen // 2 for c in no_room.completions)
