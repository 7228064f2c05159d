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
            results.append({"id": snip["id"], "time": 0.01, **ANSWERS[marker]})
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
    assert req["body"]["snippets"][0]["code"].startswith("import Mathlib\n\ntheorem add_zero'")


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
