"""What the verifier did not read is not trained on: ``verdicts.read_chars`` cuts RFT examples and masks GRPO tokens."""

from __future__ import annotations

import pytest

from ratchet.loop.train.examples import ChatExample, completion_token_ids, read_token_count
from ratchet.loop.train.grpo import GRPOSample
from ratchet.loop.train.grpo.batch import pack_rollouts
from ratchet.verifiers.reward import score

INVENTED = "3 + 4 = 7.\nAnswer: 7\nQ: Tom has 5 apples and eats 2. How many are left?\nA: 3\n"
CHAT = [{"role": "user", "content": "What is 3 + 4?"}]


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_the_verifier_reads_up_to_the_invented_exercise():
    vd = score(INVENTED, "7")
    assert vd.correct and INVENTED[: vd.read_chars] == "3 + 4 = 7.\nAnswer: 7\n"
    assert score("3 + 4 = 7.\nAnswer: 7", "7").read_chars is None  # read whole: NULL


def test_rft_trains_on_the_read_prefix_ended_with_eos(tok):
    read = score(INVENTED, "7").read_chars
    ids = tok(INVENTED, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    trained = completion_token_ids(tok, ChatExample(CHAT, INVENTED, tuple(ids), read))
    assert trained[-1] == tok.eos_token_id and trained[:-1] == ids[: len(trained) - 1]
    text = tok.decode(trained[:-1])
    assert text.startswith(INVENTED[:read]) and "Tom" not in text and len(text) < len(INVENTED)
    # read whole (NULL): the sampled ids as they are
    assert completion_token_ids(tok, ChatExample(CHAT, INVENTED, tuple(ids), None)) == ids
    # a reference solution (no ids) is cut the same way
    ref = completion_token_ids(tok, ChatExample(CHAT, INVENTED, None, read))
    assert tok.decode(ref[:-1]) == INVENTED[:read].rstrip("\n") or tok.decode(ref[:-1]).startswith(INVENTED[:read].strip())


def test_grpo_masks_the_sampled_tokens_past_the_read_span_and_counts_them(tok):
    read = score(INVENTED, "7").read_chars
    ids = tuple(tok(INVENTED, add_special_tokens=False)["input_ids"])
    k = read_token_count(tok, ids, read)
    assert k is not None and 0 < k < len(ids)
    samples = [
        GRPOSample(0, ChatExample(CHAT, INVENTED, ids, read), 1.0, False, sampler_logprobs=(-0.1,) * len(ids)),
        GRPOSample(0, ChatExample(CHAT, "Answer: 8", tuple(tok("Answer: 8")["input_ids"])), 0.0, False),
    ]
    packed = pack_rollouts(tok, samples, max_seq_len=512)
    assert packed.completions[0] == list(ids[:k]) and len(packed.sampler_lp[0]) == k
    assert packed.unread_tokens == len(ids) - k and packed.sampled_tokens == len(ids) + len(samples[1].example.completion_ids)
    _, mask = packed.completion_tensors([0, 1])
    assert int(mask[0].sum()) == k  # the loss mask covers only what the verifier read


def test_a_stop_string_s_own_tokens_are_not_trained_on(tok):
    """A completion stopped by a generation.stop string: its text ends before the string, its ids run through it;
    the verify stage records the text's length as the read span, and training takes the ids up to it, then EOS."""
    text = "Answer: 7"
    ids = tuple(tok(text + "\nQ:", add_special_tokens=False)["input_ids"])
    trained = completion_token_ids(tok, ChatExample(CHAT, text, ids, len(text)))
    assert tok.decode(trained[:-1]).startswith(text) and "Q" not in tok.decode(trained[:-1]) and trained[-1] == tok.eos_token_id
