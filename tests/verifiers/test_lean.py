"""Lean verifier against a stub Kimina Lean Server (no Lean toolchain here): the documented request and
response shapes of ``POST /api/check``, each server answer mapped to its verdict, and the escape hatches."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ratchet.verifiers import LeanServerError, score, verify
from ratchet.verifiers.lean import proof_code, verify_lean_batch

STATEMENT = "import Mathlib\n\ntheorem add_zero' (n : ℕ) : n + 0 = n := by"

# What the stub's "Lean" answers, by a marker in the proof: the shapes of the Kimina server's CommandResponse.
ANSWERS = {
    "simp": {"response": {"env": 0, "messages": []}},
    "linarith_fails": {
        "response": {
            "messages": [
                {"severity": "error", "pos": {"line": 3, "column": 2}, "data": "linarith failed to find a contradiction"}
            ]
        }
    },
    "hidden_gap": {
        "response": {
            "messages": [{"severity": "warning", "pos": {"line": 3, "column": 0}, "data": "declaration uses 'sorry'"}],
            "sorries": [{"pos": {"line": 3, "column": 2}, "endPos": {"line": 3, "column": 7}, "goal": "n + 0 = n"}],
        }
    },
    "loop_forever": {"error": "Lean REPL command timed out after 2 seconds"},
    "repl_crash": {"response": {"message": "unknown environment"}},
    "server_down": {"error": "REPL process exited unexpectedly"},
}


def _line(code: str, prefix: str) -> int | None:
    return next((i for i, ln in enumerate(code.splitlines(), 1) if ln.startswith(prefix)), None)


def _lean_answer(code: str, answer: dict) -> dict:
    """``answer`` plus what Lean 4 prints for the verifier's check commands, at the lines it reports them.

    The model part of the snippet decides, as elaboration would: a declaration proving ``True`` (the statement
    only quoted in a comment) or taking an ``include``d hypothesis fails ``#check (@name : goal)`` with Lean's
    type-mismatch message; an ``axiom`` (however attributed) or a ``sorry`` shows in ``#print axioms``.
    """
    if "error" in answer or "message" in (answer.get("response") or {}):
        return answer
    messages = list(answer["response"].get("messages", []))
    check, axioms = _line(code, "#check (@"), _line(code, "#print axioms")
    name = code.splitlines()[axioms - 1].split()[-1] if axioms else "?"
    lines = code.split("\n\n#check")[0].splitlines()
    goal = next((i for i, ln in enumerate(lines) if ln.startswith("def __ratchet_goal_")), -2)
    model = "\n".join(lines[:goal] + lines[goal + 2 :])  # the code without the verifier's goal definition
    declared = any(ln.startswith(f"theorem {name} ") for ln in model.splitlines())
    if "#exit" in model:  # Lean stops reading the file: the check commands never run
        return {**answer, "response": {**answer["response"], "messages": messages}}
    if "macro_rules" in model and "(#check" in model:  # the model's macro rewrites the check command: it says nothing
        check = None
    if "macro_rules" in model and "(#print axioms" in model:  # ... and prints what the model wants at its line
        data = f"'{name}' depends on axioms: [propext]"
        messages.append({"severity": "info", "pos": {"line": axioms, "column": 0}, "data": data})
        axioms = None
    if check and not declared:
        messages.append({"severity": "error", "pos": {"line": check, "column": 8}, "data": f"unknown identifier '{name}'"})
    elif check and (": True := " in model or "include h" in model):
        has = "True" if ": True := " in model else "False → ∀ (n : ℕ), n + 0 = n"
        messages.append(
            {"severity": "error", "pos": {"line": check, "column": 7},
             "data": f"type mismatch\n  @{name}\nhas type\n  {has} : Prop\nbut is expected to have type\n  __ratchet_goal : Prop"}
        )  # fmt: skip
    elif check:
        messages.append({"severity": "info", "pos": {"line": check, "column": 0}, "data": f"@{name} : __ratchet_goal"})
    used = ["propext"] + (["cheat"] if "axiom cheat" in model else []) + (["sorryAx"] if "hidden_gap" in model else [])
    if axioms:
        data = f"'{name}' depends on axioms: [{', '.join(used)}]"
        messages.append({"severity": "info", "pos": {"line": axioms, "column": 0}, "data": data})
    return {**answer, "response": {**answer["response"], "messages": messages}}


class _Stub(BaseHTTPRequestHandler):
    requests: list = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Stub.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
        if self.path != "/api/check":
            self.send_response(404)
            self.end_headers()
            return
        results = []
        for snip in body["snippets"]:
            marker = next((m for m in ANSWERS if m in snip["code"]), "simp")
            results.append({"id": snip["id"], "time": 0.01, **_lean_answer(snip["code"], ANSWERS[marker])})
        out = json.dumps({"results": results}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.mark.parametrize(
    "proof, reason, status",
    [
        ("```lean\n  simp\n```", "ok", "proved"),
        ("  linarith_fails", "wrong", "error"),
        ("  hidden_gap", "wrong", "sorry"),
        ("  loop_forever", "timeout", "timeout"),
        ("  repl_crash", "runtime_error", "repl_error"),
        ("  server_down", "runtime_error", "server_error"),
    ],
)
def test_server_answers_map_to_verdicts(server, proof, reason, status):
    v = verify("lean", STATEMENT, proof, lean_url=server, timeout_s=5)
    assert (v.reason, v.details["lean_status"], v.verifier) == (reason, status, "lean")
    assert v.correct == (reason == "ok")


def test_request_has_the_documented_shape(server, monkeypatch):
    monkeypatch.setenv("LEAN_SERVER_API_KEY", "k3y")
    _Stub.requests.clear()
    verify_lean_batch([(STATEMENT, "simp"), (STATEMENT, "linarith_fails")], url=server, timeout_s=7.4)
    (req,) = _Stub.requests
    assert req["path"] == "/api/check" and req["auth"] == "Bearer k3y"
    assert req["body"]["timeout"] == 7 and len(req["body"]["snippets"]) == 2
    assert all(set(s) == {"id", "code"} for s in req["body"]["snippets"])
    assert req["body"]["snippets"][0]["code"].startswith("import Mathlib\n\ndef __ratchet_goal_")
    assert "\ntheorem add_zero' (n : ℕ) : n + 0 = n := by\n  simp\n" in req["body"]["snippets"][0]["code"]


def test_error_message_is_kept(server):
    v = verify("lean", STATEMENT, "linarith_fails", lean_url=server)
    assert "linarith failed" in v.details["error"]


@pytest.mark.parametrize(
    "proof, problem",
    [
        ("sorry", "uses sorry"),
        ("exact (by admit)", "uses admit"),
        (
            "set_option debug.skipKernelTC true in\ntheorem add_zero' (n : ℕ) : n + 0 = n := by simp",
            "switches off the kernel check",
        ),
        ("theorem add_zero' (n : ℕ) : n + 0 = n := by simp\ntheorem add_zero' : True := trivial", "redefines add_zero'"),
        ("axiom cheat : False\ntheorem add_zero' (n : ℕ) : n + 0 = n := by exact cheat.elim", "declares an axiom"),
    ],
)
def test_escape_hatches_are_refused_without_a_server_call(proof, problem):
    v = verify("lean", STATEMENT, proof, lean_url="http://127.0.0.1:9")  # nothing listens: no call may be made
    assert (v.reason, v.details["problem"]) == ("wrong", problem)


def test_a_restated_statement_is_checked_as_written_and_imports_are_added():
    restated = "```lean4\ntheorem add_zero' (n : ℕ) : n + 0 = n := by\n  simp\n```"
    code = proof_code(STATEMENT, "<think>try omega</think>" + restated)
    assert code == "import Mathlib\n\ntheorem add_zero' (n : ℕ) : n + 0 = n := by\n  simp"
    assert proof_code(STATEMENT + " sorry", "  simp").endswith(":= by\n  simp")  # miniF2F golds end in sorry


def test_no_code_is_no_answer():
    assert verify("lean", STATEMENT, "```lean\n```", lean_url="http://127.0.0.1:9").reason == "no_answer"


def test_unreachable_server_is_one_clear_error():
    with pytest.raises(LeanServerError, match=r"127\.0\.0\.1:9 .*verifier\.lean_url"):
        verify("lean", STATEMENT, "simp", lean_url="http://127.0.0.1:9")


def test_composite_reward_over_lean(server):
    v = score("simp", STATEMENT, kind="lean", lean_url=server)
    assert (v.reward, v.correct, v.details["outcome_verifier"]) == (1.0, True, "lean")


# Issue 22, class 8: proofs that pass as text but not as elaborated declarations.
TEXT_PASSES = {
    # the statement quoted in a comment (so the code "restates" it) and True proved under its name
    "statement_in_a_comment_proves_true": "-- theorem add_zero' (n : ℕ) : n + 0 = n := by\nexample : True := trivial",
    # an attributed axiom slips past the text filter
    "simp_attributed_axiom": "@[simp] axiom cheat : ∀ n : ℕ, n + 0 = n\ntheorem add_zero' (n : ℕ) : n + 0 = n := by\n  simp [cheat]",
    # an inconsistent hypothesis added to every later declaration
    "variable_false_with_include": "variable (h : False)\ninclude h\ntheorem add_zero' (n : ℕ) : n + 0 = n := by\n  exact h.elim",
}


@pytest.mark.parametrize("name", sorted(TEXT_PASSES))
def test_the_elaborated_declaration_decides(server, name):
    v = verify("lean", STATEMENT, f"```lean\n{TEXT_PASSES[name]}\n```", lean_url=server, timeout_s=5)
    assert v.reason == "wrong" and v.details["lean_status"] in ("error", "axioms"), (name, v.details)


def test_the_check_commands_follow_the_code_and_the_goal_precedes_it(server):
    _Stub.requests.clear()
    verify("lean", STATEMENT, "  simp", lean_url=server, timeout_s=5)
    code = _Stub.requests[-1]["body"]["snippets"][0]["code"]
    lines = code.splitlines()
    goal = next(i for i, ln in enumerate(lines) if ln.startswith("def __ratchet_goal_"))
    assert lines[0] == "import Mathlib" and goal < next(i for i, ln in enumerate(lines) if ln.startswith("theorem add_zero'"))
    assert lines[goal + 1].strip() == "∀ (n : ℕ), n + 0 = n"
    assert lines[-2].startswith("#check (@add_zero' : __ratchet_goal_") and lines[-1] == "#print axioms add_zero'"


def test_no_axiom_report_is_not_a_proof(server):
    """Code that ends the file before the checks (``#exit``) leaves no report: wrong."""
    v = verify("lean", STATEMENT, "  simp\n#exit", lean_url=server, timeout_s=5)
    assert v.reason == "wrong" and v.details["lean_status"] in ("unchecked",), v.details


def test_standard_axioms_pass(server):
    v = verify("lean", STATEMENT, "  simp", lean_url=server, timeout_s=5)
    assert v.correct and v.details["axioms"] == ["propext"]


# Issue 36, class 7: code that rewrites the check commands, or declares the statement's name as something else.
HIJACK = (
    "macro_rules | `(#check $_) => `(#check True)\n"
    "macro_rules | `(#print axioms $_) => `(#print \"'x' depends on axioms: [propext]\")\n"
)
COMMAND_TRICKS = {
    "macro_rules_rewrite_the_checks": (HIJACK + "theorem add_zero' : True := trivial", "macro_rules"),
    "abbrev_under_the_statements_name": (
        "-- theorem add_zero' (n : ℕ) : n + 0 = n := by\n" + HIJACK + "abbrev add_zero' : Prop := True",
        "macro_rules",
    ),
    "elab_of_a_command": ('elab "#check" _x:term : command => pure ()\ntheorem add_zero\' : True := trivial', "elab"),
    "syntax_and_macro": ('syntax "#print axioms" ident : command\nmacro "#check" _x:term : command => `(#eval 0)', "syntax"),
    "notation_hides_a_term": ('notation "cheat" => (sorryAx _ false)\n  exact cheat', "notation"),
    "macro_attribute_on_a_def": ("@[macro Lean.Parser.Command.check] def m : Lean.Macro := fun _ => `(#eval 0)", "macro"),
    "eval_runs_meta_code": ("#eval show Lean.Elab.Command.CommandElabM Unit from pure ()\n  simp", "#eval"),
    "run_cmd_runs_meta_code": ("run_cmd pure ()\n  simp", "run_cmd"),
    "macro_rules_after_a_term_on_one_line": (
        "-- theorem add_zero' (n : ℕ) : n + 0 = n := by\nexample : True := trivial macro_rules | `(#check $_) => `(#check 0)",
        "macro_rules",
    ),
    "open_in_macro_rules": ("open Lean in macro_rules | `(#print axioms $_) => `(#check 0)\n  simp", "macro_rules"),
}


@pytest.mark.parametrize("name", sorted(COMMAND_TRICKS))
def test_code_that_can_rewrite_the_checks_is_refused(server, name):
    code, keyword = COMMAND_TRICKS[name]
    v = verify("lean", STATEMENT, f"```lean\n{code}\n```", lean_url=server, timeout_s=5)
    assert v.reason == "wrong" and v.details["lean_status"] == "refused" and keyword in v.details["problem"], (name, v.details)


@pytest.mark.parametrize("kind", ["abbrev", "def", "instance", "opaque"])
def test_the_statement_must_be_declared_as_a_theorem(server, kind):
    code = f"-- theorem add_zero' (n : ℕ) : n + 0 = n := by\n{kind} add_zero' (n : ℕ) : n + 0 = n := by\n  simp"
    v = verify("lean", STATEMENT, f"```lean\n{code}\n```", lean_url=server, timeout_s=5)
    assert v.reason == "wrong" and "theorem" in v.details.get("problem", ""), v.details
