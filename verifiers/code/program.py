"""The program in a model completion: the last fenced python block (``<think>`` spans dropped)."""

from __future__ import annotations


def _drop_think(text: str) -> str:
    """Text without ``<think>...</think>`` spans (an unclosed ``<think>`` hides the rest); linear time."""
    out, pos = [], 0
    while True:
        start = text.find("<think>", pos)
        if start < 0:
            return "".join(out) + text[pos:]
        out.append(text[pos:start])
        end = text.find("</think>", start)
        if end < 0:
            return "".join(out)
        pos = end + len("</think>")


def extract_code(completion: str) -> str:
    """The program in a completion: the last fenced ``python``/``py`` block, else the last fenced
    block, else the whole text.

    Fences are lines starting with three backticks. A block whose closing fence is missing (the
    generation was cut at EOS or ``max_new_tokens``) runs to the end of the text. Linear time.
    """
    blocks: list[tuple[str, str]] = []
    lang, body = None, []  # lang is None outside a block
    for line in _drop_think(completion).split("\n"):
        stripped = line.strip()
        if stripped.startswith("```"):
            if lang is None:
                lang, body = stripped[3:].strip().split(" ")[0].lower(), []
                continue
            if not stripped[3:].strip():
                blocks.append((lang, "".join(x + "\n" for x in body)))
                lang = None
                continue
        if lang is not None:
            body.append(line)
    if lang is not None:
        blocks.append((lang, "\n".join(body)))
    py = [b for lang_, b in blocks if lang_ in ("python", "py", "python3")]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    return _drop_think(completion)
