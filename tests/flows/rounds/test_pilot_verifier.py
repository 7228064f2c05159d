"""The pilot's rule for a source's own verifier: most samples ending in verifier_error stop the run; False does not."""

from ratchet.flows.rounds.pilot import broken_verifier
from ratchet.verifiers.verdict import Verdict

NAME = "plugin:own_checks:verify"


def verdict(reason: str) -> Verdict:
    details = {"error": "KeyError: 'reference'"} if reason == "verifier_error" else {}
    return Verdict(correct=reason == "ok", reward=float(reason == "ok"), reason=reason, parsed=None, verifier=NAME,
                   verifier_version="0+x", details=details)  # fmt: skip


def test_most_samples_failing_name_the_source_the_verifier_and_the_first_error():
    rows = [{"source": "own"}] * 4 + [{"source": "sums"}] * 2
    scored = [(NAME, verdict(r)) for r in ("verifier_error", "verifier_error", "verifier_error", "ok")]
    scored += [("math", verdict("wrong"))] * 2
    line = broken_verifier(rows, scored)
    assert line is not None and "'own_checks:verify' of tasks source 'own' failed on 3/4 samples" in line
    assert "(first: KeyError: 'reference')" in line and "\n" not in line


def test_half_failing_or_all_wrong_is_not_a_broken_verifier():
    rows = [{"source": "own"}] * 4
    half = [(NAME, verdict(r)) for r in ("verifier_error", "verifier_error", "wrong", "ok")]
    assert broken_verifier(rows, half) is None
    assert broken_verifier(rows, [(NAME, verdict("wrong"))] * 4) is None
