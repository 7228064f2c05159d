"""Language consistency: the share of a completion's letters written in the target language's script.

DeepSeek-R1 (DeepSeek-AI 2025, section 2.3.2) adds a language-consistency reward, "the proportion
of target language words in the CoT", to stop RL from mixing languages in one chain of thought.
This is a script-based measure of the same thing, computed with ``unicodedata`` only (no model, no
download, linear time):

    share = (letters whose Unicode script belongs to the target language) / (all letters)

Policy (a change bumps ``VERSION``):
    * Letters are characters of Unicode category ``L*``; digits, punctuation, symbols, spaces and
      math operators do not count either way. A completion with no letters has share 1.0 (nothing
      in another language).
    * LaTeX control words (``\\frac``, ``\\sqrt``) and fenced code blocks are removed first: they are
      notation, not language, and would otherwise count as Latin in a Chinese chain of thought.
    * The script of a letter is the first word of its Unicode name (``LATIN``, ``CJK``,
      ``CYRILLIC``, ...); halfwidth/fullwidth forms take the script they spell (``FULLWIDTH LATIN``).
    * Languages map to scripts in ``LANGUAGES``: ``ja`` accepts Kanji, Hiragana and Katakana; ``ko``
      accepts Hangul and Hanja. Languages sharing a script (English and French) are not told apart.
"""

from __future__ import annotations

import re
import unicodedata

VERSION = "language-1.0.0"

LANGUAGES: dict[str, frozenset[str]] = {
    "en": frozenset({"LATIN"}),
    "fr": frozenset({"LATIN"}),
    "de": frozenset({"LATIN"}),
    "es": frozenset({"LATIN"}),
    "zh": frozenset({"CJK"}),
    "ja": frozenset({"CJK", "HIRAGANA", "KATAKANA"}),
    "ko": frozenset({"HANGUL", "CJK"}),
    "ru": frozenset({"CYRILLIC"}),
    "uk": frozenset({"CYRILLIC"}),
    "el": frozenset({"GREEK"}),
    "ar": frozenset({"ARABIC"}),
    "he": frozenset({"HEBREW"}),
    "hi": frozenset({"DEVANAGARI"}),
}
_NOTATION = re.compile(r"```.*?(?:```|\Z)|\\[A-Za-z]+", re.DOTALL)
_WIDTH = ("FULLWIDTH ", "HALFWIDTH ")


def script_of(ch: str) -> str:
    """The script name of one character (``"LATIN"``, ``"CJK"``, ...; ``"UNKNOWN"`` if it has no Unicode name)."""
    name = unicodedata.name(ch, "UNKNOWN")
    for prefix in _WIDTH:
        name = name.removeprefix(prefix)
    return name.split(" ", 1)[0]


def check_language(target: str) -> frozenset[str]:
    """The scripts of ``target``.

    Raises:
        ValueError: ``target`` is not in ``LANGUAGES`` (the message lists them).
    """
    if target not in LANGUAGES:
        raise ValueError(f"target_language {target!r} is unknown; use one of {sorted(LANGUAGES)} or 'none'")
    return LANGUAGES[target]


def language_share(text: str, target: str) -> float:
    """Share of ``text``'s letters in ``target``'s script, in [0, 1] (1.0 when it has no letters).

    Raises:
        ValueError: unknown ``target`` (see ``check_language``).
    """
    return script_share(text, check_language(target))


def script_share(text: str, scripts: frozenset[str]) -> float:
    """Share of ``text``'s letters whose script is in ``scripts``, in [0, 1] (1.0 when it has no letters), under the
    module's policy (notation removed first)."""
    letters = [ch for ch in _NOTATION.sub(" ", text) if unicodedata.category(ch).startswith("L")]
    if not letters:
        return 1.0
    return sum(script_of(ch) in scripts for ch in letters) / len(letters)
