"""Math answer verification: extract -> parse -> compare, with a killable sympy worker pool.

Two stages like Math-Verify, one module per responsibility:

* ``verify`` -- the entry points ``verify_math`` / ``verify_math_batch``; its docstring is the full prose policy;
* ``extraction`` (``extract`` with ``lines``, ``prose``, ``tail``) -- stage 1a, the final answer a completion states;
* ``parsing`` (``parse`` with ``normalize``, ``arith``, ``matrix``) -- stage 1b, that answer as a typed ``Answer``;
* ``comparison`` -- stage 2: ``compare``, exact comparison in the caller's process (``NeedsCAS`` when sympy must
  decide), and ``symbolic`` / ``cas``, the sympy comparison in SIGKILLable worker processes and their reply cache;
* ``choices`` -- multiple-choice answers; ``golds`` -- the answer a gold states as datasets store it;
* ``policy`` -- the policy as clauses with golden rows (``VERSION``; the source of ``docs/verifier-policy.md``).
"""

from __future__ import annotations

from ratchet.verifiers.math.comparison.cas import POOL_SIZE, shutdown_pool
from ratchet.verifiers.math.extraction.extract import ANSWER_FORMATS, AnswerFormat, Extraction, extract_answer
from ratchet.verifiers.math.golds import choice_gold, gold_answer_text
from ratchet.verifiers.math.parsing.parse import Answer, ParseError, parse_answer
from ratchet.verifiers.math.policy import VERSION
from ratchet.verifiers.math.verify import verify_math, verify_math_batch

__all__ = [
    "VERSION",
    "POOL_SIZE",
    "verify_math",
    "verify_math_batch",
    "extract_answer",
    "parse_answer",
    "gold_answer_text",
    "choice_gold",
    "Answer",
    "Extraction",
    "ANSWER_FORMATS",
    "AnswerFormat",
    "ParseError",
    "shutdown_pool",
]
