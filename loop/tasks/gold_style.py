"""Golds checked for what their file says they are: one check for ``ratchet tasks check``, ``init`` and the preflight.

A math gold can pass every per-record check and still be one the verifier never credits as meant: in a GSM8K-style
file (golds ``... #### 42``) a record whose answer has no ``####`` gives its whole worked text as the gold, and
``#### twelve`` is text, which the math verifier compares only literally (it credits ``Answer: twelve``, never
``Answer: 12``). ``gold_style_problems`` looks at a file's math golds together and returns one
``<path>:<line>: <what was found>`` line per gold that breaks the file's own style:

* **no ``####``** where most (over half) of the file's answers end with ``#### <answer>``;
* **a text gold** (the math verifier's ``kind == "text"``: not a number, fraction, expression, interval, set, choice
  letter or relation, per ``ratchet.verifiers.math.parsing.parse``, docs/verifier-policy.md) where most of the file's golds are
  values it compares. A file of text golds (yes/no, names) is left as it is: there, literal comparison is the intent.
"""

from __future__ import annotations

from ratchet.verifiers.math.parsing.parse import ParseError, TooLarge, parse_answer

GSM8K_MARK = "####"


def _kind(gold: str | None) -> str:
    if gold is None:
        return "unparsed"  # the record's gold did not convert (its own error says why)
    try:
        return parse_answer(gold).kind
    except (ParseError, TooLarge):
        return "unparsed"  # math_gold refused it already


def gold_style_problems(golds: list[tuple[str, object, str]], answer_field: str = "answer") -> list[tuple[int, str]]:
    """The golds of one math file that break its style (see the module docstring), in file order.

    Args:
        golds: ``(where, raw answer field value, gold as converted)`` per math record (``where``: ``path:line``;
            the gold None where it did not convert: only the ``####`` rule applies to it).
        answer_field: the field the raw values come from, named in the messages.

    Returns:
        ``(index into golds, line)`` per problem, the line ``<where>: <what was found>; <the fix>``.
    """
    n = len(golds)
    if not n:
        return []
    marked = [isinstance(raw, str) and GSM8K_MARK in raw for _, raw, _ in golds]
    kinds = [_kind(g) for _, _, g in golds]
    text = sum(k == "text" for k in kinds)
    out = []
    for i, ((where, raw, gold), has_mark, kind) in enumerate(zip(golds, marked, kinds)):
        if sum(marked) * 2 > n and not has_mark:
            shown = " ".join(str(raw).split())
            out.append(
                (
                    i,
                    f"{where}: no '{GSM8K_MARK} <answer>' in {answer_field!r} ({shown[:60]!r}{'…' if len(shown) > 60 else ''}), "
                    f"though {sum(marked)} of the file's {n} golds end with one; end it with '{GSM8K_MARK} <value>'",
                )
            )
        elif kind == "text" and text * 2 < n:
            out.append(
                (
                    i,
                    f"{where}: gold {gold[:60]!r} is text, not a number, fraction, expression or interval the math verifier "
                    f"compares (it would credit only the literal 'Answer: {gold[:30]}'); write the value itself "
                    f"(a number or expression: '{GSM8K_MARK} 12', not '{GSM8K_MARK} twelve')",
                )
            )
    return out
