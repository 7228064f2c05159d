"""Lean 4 proof verification through a Kimina Lean Server the user runs (HTTP JSON, ``POST /api/check``).

The gold is the formal statement (``theorem foo (n : ℕ) : n + 0 = n := by``, imports allowed), the
completion holds the proof. The server (https://github.com/project-numina/kimina-lean-server)
compiles each snippet in a Lean REPL and answers per snippet; its own client on PyPI
(``kimina-client`` 0.2.1) does not import on Python 3.11 (``typing.TypedDict`` in a pydantic model), so
this module speaks the same documented request/response shapes with httpx:

    request  {"snippets": [{"id": str, "code": str}], "timeout": int s, "debug": false, "reuse": true}
    response {"results": [{"id": str, "time": float s, "error": str | null,
                           "response": {"messages": [{"severity", "pos", "data"}], "sorries": [...]}
                                       | {"message": str} | null}]}

Policy (a change to any of these bumps ``VERSION``):
    * **What is checked**: the last fenced ````lean`` / ````lean4`` block of the completion, else the
      whole completion (thinking blocks removed). When that code does not restate the gold statement
      (whitespace-insensitive), it is the proof of the statement: ``statement + "\\n" + proof``
      (a proof that starts unindented is indented two spaces, under the statement's ``by``). When
      it does, it is checked as written, so the statement the model proved is the gold's. The gold's
      ``import``/``open``/``set_option`` lines the code lacks are put first, and a gold's trailing
      placeholder ``sorry`` (miniF2F) is dropped.
    * **No escape hatches**: code that declares an ``axiom``, uses ``sorry``/``admit``, sets
      ``debug.skipKernelTC``, or redefines the statement's name is ``wrong`` before any server call (``details["problem"]``).
    * **Nothing can rewrite the checks** (issue 36): the check commands follow the code in the same snippet (the
      Kimina API runs each snippet in its own environment and cannot run a second one in the first's), so code
      that could change how they are read or run is refused before any server call: the commands ``macro``,
      ``macro_rules``, ``syntax``, ``elab``, ``elab_rules``, ``notation`` (and ``notation3``), ``infix``/``infixl``/
      ``infixr``/``prefix``/``postfix``, ``declare_syntax_cat``, ``initialize``, ``simproc``, ``binder_predicate``
      (anywhere as a token: after a term on the same line, after ``open ... in``), code run while Lean reads the file (``#eval``,
      ``run_cmd``, ``run_elab``, ``run_meta``, ``run_tac``, ``by_elab``), and attributes that register such code
      (``@[macro ...]``, ``command_elab``, ``term_elab``, ``tactic``, ``implemented_by``, ``extern``, ``init``, ...).
      The statement's name must be declared as a ``theorem``/``lemma`` (not ``abbrev``, ``def``, ``instance``,
      ``opaque``, ...; comments are not declarations).
    * **The elaborated declaration decides, not the text** (issue 22): the snippet elaborates the gold's
      statement first (``def __ratchet_goal_<tag> : Prop``), then the code, then
      ``#check (@NAME : __ratchet_goal_<tag>)`` and ``#print axioms NAME``. A declaration whose type is not
      the statement (the statement quoted in a comment and ``True`` proved, a hypothesis added with
      ``variable`` + ``include``) fails the ``#check``: ``wrong``. Axioms other than ``propext``,
      ``Classical.choice`` and ``Quot.sound`` (an ``@[simp] axiom``, ``sorryAx``): ``wrong``
      (``lean_status = "axioms"``, ``details["axioms"]``). No axiom report at the ``#print`` line (the
      code ends the file early, an open comment): ``wrong`` (``"unchecked"``).
    * **Verdicts**: proved (no error message, no sorry) -> ``ok``; a Lean error -> ``wrong``
      (``details["lean_status"] = "error"``, first error message); a sorry the server saw ->
      ``wrong`` (``"sorry"``); the server's "timed out" -> ``timeout``; a REPL or other server error
      -> ``runtime_error`` (``"repl_error"`` / ``"server_error"``); nothing to check -> ``no_answer``.
    * **Unreachable server**: ``LeanServerError`` (one line naming the URL and the fix), never a
      verdict: a down server is an operations failure, not the model's.

Not run against a real Lean toolchain here (none on the development machines or the CI): tested against
a stub server that implements the shapes above and answers the check commands with the messages Lean 4
prints for them, at the lines it reports them (tests/verifiers/test_lean.py); not recorded from a real server.
"""

from __future__ import annotations

import os
import re
import textwrap
import time
import uuid
from collections.abc import Sequence

from ratchet.verifiers.verdict import Verdict

VERSION = "lean-1.2.0"  # 1.2: metaprogramming refused, the statement declared as a theorem
DEFAULT_URL = "http://localhost:8000"
_FENCE = re.compile(r"```[ \t]*lean4?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FORBIDDEN = [
    (re.compile(r"(?m)^\s*(?:private\s+|noncomputable\s+)*axiom\b"), "declares an axiom"),
    (re.compile(r"\bsorry\b"), "uses sorry"),
    (re.compile(r"\badmit\b"), "uses admit"),
    (re.compile(r"\bdebug\.skipKernelTC\b"), "switches off the kernel check"),
]
# Commands that change how later commands are read or run, or run code while Lean reads the file (issue 36,
# class 7): any of them could rewrite the check commands that follow the code (``macro_rules | `(#check $_) => ...``).
# A command keyword anywhere as a token (Lean needs no newline between commands: ``... := trivial macro_rules | ...``,
# ``open Lean in macro_rules ...``); a keyword cannot be an identifier, so only a dotted name (``List.prefix``) or a
# comment holds the word otherwise, and a comment is refused too (nothing can hide a command).
_META_COMMANDS = re.compile(
    r"(?<![\w.'!?])(macro_rules|macro|syntax|elab_rules|elab|notation\w*|infixl|infixr|infix|prefix|postfix|"
    r"declare_syntax_cat|initialize|builtin_initialize|simproc|dsimproc|binder_predicate)(?![\w'!?])"
)
_META_RUNS = re.compile(r"(#eval\b!?|\brun_cmd\b|\brun_elab\b|\brun_meta\b|\brun_tac\b|\bby_elab\b)")
_COMMENT = re.compile(r"/-.*?-/|--[^\n]*", re.DOTALL)
_META_ATTRS = re.compile(
    r"(?:@\[|\battribute\s*\[)[^\]]*?\b(macro|command_elab|term_elab|tactic|command_parser|term_parser|"
    r"builtin_\w+|implemented_by|extern|init|env_linter)\b"
)
_DECL_KINDS = r"theorem|lemma|def|abbrev|instance|opaque|axiom|structure|inductive|class|example"
_DECL_NAME = re.compile(r"\b(?:theorem|lemma|example|def)\s+([^\s(:{\[]+)")
_HEAD = re.compile(r"^\s*(?:@\[[^\]]*\]\s*)?(?:private\s+|protected\s+)?(theorem|lemma|example)\b\s*")
# The axioms a proof may rest on (Lean's and Mathlib's standard three); anything else (an added ``axiom``,
# ``sorryAx``) refuses the proof. Read from ``#print axioms`` on the elaborated declaration.
STANDARD_AXIOMS = frozenset({"propext", "Classical.choice", "Quot.sound"})
_AXIOMS_MSG = re.compile(r"depends on axioms:\s*\[(.*?)\]", re.DOTALL)


class LeanServerError(RuntimeError):
    """The Lean server could not be reached or answered outside the protocol."""


def server_url(url: str | None = None) -> str:
    """The Lean server's base URL: ``url``, else ``$LEAN_SERVER_API_URL``, else ``http://localhost:8000``."""
    return (url or os.environ.get("LEAN_SERVER_API_URL") or DEFAULT_URL).rstrip("/")


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


_PREAMBLE = re.compile(r"^\s*(?:import|open|set_option)\b")


def split_statement(statement: str) -> tuple[str, str]:
    """(preamble, theorem) of a gold statement: leading ``import``/``open``/``set_option`` lines, and the rest
    with a trailing placeholder ``sorry`` removed (miniF2F-style golds end ``:= by sorry``)."""
    lines = statement.strip().splitlines()
    k = 0
    while k < len(lines) and (_PREAMBLE.match(lines[k]) or not lines[k].strip()):
        k += 1
    theorem = "\n".join(lines[k:]).rstrip()
    theorem = re.sub(r"\bsorry\s*$", "", theorem).rstrip()
    return "\n".join(lines[:k]).strip(), theorem


def proof_code(statement: str, completion: str) -> str | None:
    """The Lean code to check for ``completion`` against the gold ``statement`` (see the policy), or None when empty."""
    text = _THINK.sub("", completion)
    blocks = _FENCE.findall(text)
    code = (blocks[-1] if blocks else text).rstrip().lstrip("\n")
    if not code.strip():
        return None
    preamble, theorem = split_statement(statement)
    head = _squash(theorem.removesuffix("by").rstrip().removesuffix(":=").rstrip())
    missing = "\n".join(line for line in preamble.splitlines() if _squash(line) not in _squash(code))
    if not head or head not in _squash(code):
        body = code if code[:1].isspace() else textwrap.indent(code, "  ")  # a tactic block sits under its `by`
        code = f"{theorem}\n{body}" if theorem else code.strip()
    else:
        code = textwrap.dedent(code).strip()
    return f"{missing}\n\n{code}" if missing else code


def _refusal(statement: str, code: str) -> str | None:
    """Why ``code`` may not be sent (an escape hatch seen in the text), or None; a first filter only: the
    elaborated declaration's type and axioms decide (:func:`checked_snippet`)."""
    _, theorem = split_statement(statement)
    body = code.replace(theorem, "", 1)
    for pattern, why in _FORBIDDEN:
        if pattern.search(body):
            return why
    for pattern, what in ((_META_COMMANDS, "command"), (_META_ATTRS, "attribute"), (_META_RUNS, "command")):
        m = pattern.search(body)  # the raw text, comments included: nothing can hide a command from this
        if m:
            return f"uses the {what} {m.group(1)!r}, which can rewrite the check commands; prove the statement without metaprogramming"
    names = _DECL_NAME.findall(theorem)
    if not names:
        return None
    decls = re.findall(rf"\b({_DECL_KINDS})\s+{re.escape(names[0])}(?![^\s(:{{\[])", _COMMENT.sub(" ", code))
    if len(decls) > 1:
        return f"redefines {names[0]}"
    if decls and decls[0] not in ("theorem", "lemma"):
        return f"declares {names[0]} as {decls[0]}, not a theorem; state it as 'theorem {names[0]} ...'"
    return None


def _top_level(text: str, token: str, start: int = 0) -> int:
    """Index of the first ``token`` outside brackets in ``text`` from ``start``, or -1."""
    depth = 0
    for i in range(start, len(text)):
        c = text[i]
        if c in "([{⦃⟨":
            depth += 1
        elif c in ")]}⦄⟩":
            depth -= 1
        elif depth == 0 and text.startswith(token, i) and not (token == ":" and text.startswith(":=", i)):
            return i
    return -1


def goal_parts(theorem: str) -> tuple[str | None, str, str] | None:
    """``(name, binders, type)`` of a gold ``theorem name binders : type := ...`` (name None for ``example``), or None."""
    m = _HEAD.match(theorem)
    if not m:
        return None
    rest = theorem[m.end() :]
    name = None
    if m.group(1) != "example":
        nm = re.match(r"([^\s(:{\[⦃]+)\s*", rest)
        if not nm:
            return None
        name, rest = nm.group(1), rest[nm.end() :]
    colon = _top_level(rest, ":")
    if colon < 0:
        return None
    end = _top_level(rest, ":=", colon)
    binders, typ = rest[:colon].strip(), (rest[colon + 1 : end] if end >= 0 else rest[colon + 1 :]).strip()
    return (name, binders, typ) if typ else None


def checked_snippet(statement: str, code: str, tag: str) -> tuple[str, str, int, int] | None:
    """The snippet sent to Lean: ``code`` plus a check of the elaborated declaration (issue 22, class 8).

    Lean elaborates the gold's statement first, right after the imports, as ``def __ratchet_goal_<tag> : Prop``
    (so nothing the model's code declares changes what the statement means); after the code come
    ``#check (@NAME : __ratchet_goal_<tag>)``, which fails unless the declaration proves exactly that
    proposition (a ``True`` proved under the statement's name, an extra hypothesis from ``variable`` +
    ``include``), and ``#print axioms NAME``, whose answer must list only :data:`STANDARD_AXIOMS`.
    An ``example`` gold is given the name ``__ratchet_proof_<tag>``.

    Returns:
        ``(snippet, NAME, line of the #check, line of the #print axioms)`` (1-based, as Lean reports
        positions), or None when the gold's statement cannot be split into binders and type.
    """
    preamble, theorem = split_statement(statement)
    parts = goal_parts(theorem)
    if parts is None:
        return None
    name, binders, typ = parts
    if name is None:
        name = f"__ratchet_proof_{tag}"
        code = re.sub(r"(?m)^(\s*)example\b", rf"\1theorem {name}", code, count=1)
    lines = code.splitlines()
    imports = [ln for ln in lines if re.match(r"\s*import\b", ln)]
    rest = [ln for ln in lines if not re.match(r"\s*import\b", ln)]
    goal = f"∀ {binders}, {typ}" if binders else typ
    head = imports + ["", f"def __ratchet_goal_{tag} : Prop :=", f"  {goal}", ""]
    tail = ["", "", f"#check (@{name} : __ratchet_goal_{tag})", f"#print axioms {name}", ""]
    check_line = len(head) + len(rest) + 3
    return "\n".join(head + rest + tail), name, check_line, check_line + 1


def _axioms(result: dict, line: int) -> list[str] | None:
    """The axioms ``#print axioms`` reported at ``line`` (``[]``: none), or None when it reported nothing there."""
    resp = result.get("response") or {}
    for m in resp.get("messages") or []:
        pos = m.get("pos") or {}
        if pos.get("line") != line:
            continue
        data = str(m.get("data", ""))
        if "does not depend on any axioms" in data:
            return []
        found = _AXIOMS_MSG.search(data)
        if found:
            return [a.strip() for a in found.group(1).split(",") if a.strip()]
    return None


def _post(url: str, snippets: list[dict], timeout_s: float, api_key: str | None) -> list[dict]:
    try:  # the optional extra ratchet[lean]: math and code verification must not need it
        import httpx
    except ImportError as e:
        raise LeanServerError("the Lean verifier needs httpx; pip install 'ratchet[lean]'") from e
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    body = {"snippets": snippets, "timeout": max(1, round(timeout_s)), "debug": False, "reuse": True}
    try:
        resp = httpx.post(f"{url}/api/check", json=body, headers=headers, timeout=timeout_s * len(snippets) + 30.0)
        resp.raise_for_status()
        results = resp.json()["results"]
    except httpx.HTTPError as e:
        raise LeanServerError(
            f"Lean server at {url} failed ({type(e).__name__}: {e}); start a Kimina Lean Server there or set verifier.lean_url"
        ) from e
    except (ValueError, KeyError, TypeError) as e:
        raise LeanServerError(f"Lean server at {url} answered without a 'results' list; is it a Kimina Lean Server?") from e
    return results


def _classify(result: dict) -> tuple[str, str, str | None]:
    """(reason, lean_status, first error message) of one server result."""
    if result.get("error"):
        err = str(result["error"])
        return ("timeout", "timeout", err) if "timed out" in err else ("runtime_error", "server_error", err)
    resp = result.get("response") or {}
    if "message" in resp:
        return "runtime_error", "repl_error", str(resp["message"])
    errors = [m for m in resp.get("messages") or [] if m.get("severity") == "error"]
    if errors:
        return "wrong", "error", str(errors[0].get("data", ""))[:500]
    if resp.get("sorries"):
        return "wrong", "sorry", None
    return "ok", "proved", None


def verify_lean_batch(
    items: Sequence[tuple[str, str]],
    *,
    url: str | None = None,
    timeout_s: float = 60.0,
    api_key: str | None = None,
) -> list[Verdict]:
    """Verify ``(statement, completion)`` pairs with one request to the Lean server.

    Args:
        items: gold formal statement and model completion per item.
        url: server base URL (see ``server_url``).
        timeout_s: Lean's limit per snippet, seconds (whole seconds on the wire, at least 1).
        api_key: sent as ``Authorization: Bearer``; default ``$LEAN_SERVER_API_KEY``.

    Returns:
        One ``Verdict(verifier="lean")`` per item, in order; ``parsed`` is the checked code.

    Raises:
        LeanServerError: the server is unreachable, returns an HTTP error, or answers off-protocol.
    """
    t0 = time.perf_counter()
    base = server_url(url)
    key = api_key or os.environ.get("LEAN_SERVER_API_KEY")
    out: list[Verdict | None] = [None] * len(items)
    pending: dict[str, tuple[int, str]] = {}
    for i, (statement, completion) in enumerate(items):
        code = proof_code(statement, completion)
        if code is None:
            out[i] = Verdict.outcome("lean", VERSION, "no_answer", t0, problem="no Lean code in the completion")
            continue
        why = _refusal(statement, code)
        if why:
            out[i] = Verdict.outcome("lean", VERSION, "wrong", t0, parsed=code, lean_status="refused", problem=why)
            continue
        sid = uuid.uuid4().hex
        checked = checked_snippet(statement, code, sid[:12])
        if checked is None:
            out[i] = Verdict.outcome(
                "lean", VERSION, "bad_gold", t0, parsed=code, lean_status="refused",
                problem="the gold statement is not 'theorem name binders : type := ...'; fix the task",
            )  # fmt: skip
            continue
        pending[sid] = (i, code, checked)
    if pending:
        results = _post(base, [{"id": k, "code": c[0]} for k, (_, _, c) in pending.items()], timeout_s, key)
        by_id = {str(r.get("id")): r for r in results if isinstance(r, dict)}
        for sid, (i, code, (_, name, _, axioms_line)) in pending.items():
            if sid not in by_id:
                raise LeanServerError(f"Lean server at {base} returned no result for snippet {sid}; check the server's logs")
            reason, status, error = _classify(by_id[sid])
            extra: dict = {}
            if reason == "ok":
                axioms = _axioms(by_id[sid], axioms_line)
                if axioms is None:
                    reason, status, error = "wrong", "unchecked", f"Lean reported no axioms for {name} (the code stops the check)"
                elif not set(axioms) <= STANDARD_AXIOMS:
                    bad = sorted(set(axioms) - STANDARD_AXIOMS)
                    reason, status, error = "wrong", "axioms", f"{name} depends on non-standard axioms {bad}"
                extra["axioms"] = axioms
            out[i] = Verdict.outcome("lean", VERSION, reason, t0, parsed=code, lean_status=status, error=error, **extra)
    return [v for v in out if v is not None]


def verify_lean(
    statement: str, completion: str, *, url: str | None = None, timeout_s: float = 60.0, api_key: str | None = None
) -> Verdict:
    """Verify one proof; see ``verify_lean_batch`` (same arguments, same errors)."""
    return verify_lean_batch([(statement, completion)], url=url, timeout_s=timeout_s, api_key=api_key)[0]
