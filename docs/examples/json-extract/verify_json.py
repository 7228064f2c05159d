"""The JSON-extraction example's verifier: the reply's JSON object must match the schema and the record's values.

Ratchet calls ``verify(completion, record)`` in a worker process with a time limit (docs/own-task.md). The completion
is model output, so it is hostile text: only its first ``MAX_CHARS`` characters are read, ``json`` refuses deep
nesting with ``RecursionError``, and nothing in it is executed.

Reward: the share of the three fields the reply got right (partial credit for GRPO), 0 when no schema-valid object
is found; ``correct`` only when all three match (what RFT keeps and the gate counts).
"""

from __future__ import annotations

import json
import re

import jsonschema

from ratchet.verifiers import Verdict

version = "1.0"  # bump when a change can flip a verdict (the file's sha256 is stored beside it anyway)

MAX_CHARS = 4096
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 100},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 100},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)


def _candidates(text: str):
    """JSON object texts in the reply: fenced blocks first, then every balanced ``{...}`` span."""
    yield from (m.group(1) for m in _FENCE.finditer(text))
    depth, start = 0, None
    for i, ch in enumerate(text):
        if ch == "{":
            depth, start = depth + 1, i if depth == 0 else start
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0 and start is not None:
                yield text[start : i + 1]


def _same(got, want) -> bool:
    """Text compares case- and space-insensitively, numbers exactly."""
    if isinstance(want, str):
        return " ".join(got.split()).lower() == " ".join(want.split()).lower()
    return got == want


def verify(completion: str, record: dict) -> Verdict:
    """Judge one reply: the first schema-valid JSON object it holds, compared field by field with ``record["expected"]``.

    Raises:
        KeyError: the record has no ``expected`` field (a task-data problem: Ratchet reports it as a verifier error).
    """
    expected = record["expected"]
    text = completion[:MAX_CHARS]
    found = None
    for raw in _candidates(text):
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if _VALIDATOR.is_valid(obj):
            found = obj
            break
    if found is None:
        return Verdict(False, 0.0, "no_answer", None, verifier="json-extract", verifier_version=version)
    right = sum(_same(found[k], expected[k]) for k in SCHEMA["required"])
    share = right / len(SCHEMA["required"])
    return Verdict(
        correct=share == 1.0,
        reward=share,
        reason="ok" if share == 1.0 else "wrong",
        parsed=json.dumps(found, sort_keys=True),
        verifier="json-extract",
        verifier_version=version,
    )
