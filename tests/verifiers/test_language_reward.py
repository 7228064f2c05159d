"""Language-consistency share (script-based) and its term in the composite reward."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratchet.verifiers import score
from ratchet.verifiers.language import LANGUAGES, language_share, script_of


@pytest.mark.parametrize(
    "text, target, share",
    [
        ("The sum is 12. Answer: 12", "en", 1.0),
        ("所以答案是 12", "zh", 1.0),
        ("所以 answer 是 12", "zh", 3 / 9),  # 3 Han letters, 6 Latin letters
        ("所以 answer 是 12", "en", 6 / 9),
        ("Ответ: 12", "ru", 1.0),
        ("Ответ: 12", "en", 0.0),
        ("ひらがなとカタカナと漢字", "ja", 1.0),
        ("한국어 답", "ko", 1.0),
        ("12 + 3 = 15", "zh", 1.0),  # no letters: nothing in another language
        ("答案是 $\\frac{1}{2}$", "zh", 1.0),  # LaTeX control words are notation
        ("答案\n```python\nprint(1)\n```\n是", "zh", 1.0),  # code blocks are notation
        ("ＡＢ答", "en", 2 / 3),  # fullwidth Latin is Latin
    ],
)
def test_share_table(text, target, share):
    assert language_share(text, target) == pytest.approx(share)


def test_unknown_language_lists_the_valid_ones():
    with pytest.raises(ValueError, match="use one of .*'zh'"):
        language_share("x", "klingon")


@given(st.text(max_size=60), st.sampled_from(sorted(LANGUAGES)))
def test_share_is_a_fraction(text, target):
    assert 0.0 <= language_share(text, target) <= 1.0


@given(st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll")), min_size=1, max_size=40))
def test_shares_of_disjoint_scripts_sum_to_at_most_one(text):
    assert language_share(text, "en") + language_share(text, "ru") + language_share(text, "zh") <= 1.0 + 1e-9


def test_script_names():
    assert [script_of(c) for c in "aЖ中あ"] == ["LATIN", "CYRILLIC", "CJK", "HIRAGANA"]


def test_reward_adds_the_weighted_share_when_the_answer_parses():
    mixed = "所以 answer 是 12\nAnswer: 12"  # Han 3, Latin 12 ("answer", "Answer")
    v = score(mixed, "12", format_template="answer_line", format_weight=0.1, language_weight=0.5, target_language="zh")
    assert v.details["language_share"] == pytest.approx(3 / 15)
    assert v.reward == pytest.approx(0.1 + 1.0 + 0.5 * 3 / 15)
    wrong = score(mixed.replace(": 12", ": 13"), "12", format_template="answer_line", language_weight=0.5, target_language="zh")
    assert wrong.reward == pytest.approx(0.1 + 0.5 * 3 / 15)


def test_no_language_credit_without_an_answer():
    v = score("全部是中文", "12", language_weight=1.0, target_language="zh")
    assert (v.reason, v.reward) == ("no_answer", 0.0)


def test_off_by_default_and_unchanged_reward():
    v = score("Answer: 12", "12", format_template="answer_line")
    assert v.reward == pytest.approx(1.1) and "language_share" not in v.details


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"language_weight": 0.1}, "needs a target_language"),
        ({"language_weight": 2.0, "target_language": "en"}, r"language_weight \(2.0\) must be in \[0, 1\]"),
        ({"target_language": "xx"}, "target_language 'xx' is unknown"),
    ],
)
def test_bad_language_settings_say_how_to_fix(kw, match):
    with pytest.raises(ValueError, match=match):
        score("Answer: 1", "1", **kw)
