"""Judging assert tests: the trusted prep run, the program's probe run, then the parent or the judge run decides
(the scheme is in ``ratchet.verifiers.code``'s docstring; the split itself in ``ratchet.verifiers.code.trust_plan``)."""

from __future__ import annotations

import ast
import json
from typing import Any

from ratchet.verifiers.code.budget import Runs, trusted_failure
from ratchet.verifiers.code.records import Malformed, decode, failure, fast_judge, indexed, shape
from ratchet.verifiers.code.trust_plan import Plan


def _prep_args(plan: Plan, runs: Runs) -> tuple[list[Any], tuple[str, dict[str, Any]] | None]:
    """Evaluate the setup-defined argument expressions in a trusted run (no model code); encoded values."""
    if not plan.args:
        return [], None
    res = runs.run({"mode": "prep", "setup": plan.setup, "exprs": plan.args})
    bad = failure(res)
    if bad:
        return [], trusted_failure(runs, "test setup", bad)
    try:
        recs = indexed(res, ("value", "error"), len(plan.args))
    except Malformed as exc:
        return [], ("bad_gold", {"error": str(exc)})
    out = []
    for i, expr in enumerate(plan.args):
        r = recs.get(i)
        if r is None or r[0] == "error":
            why = "raised " + " ".join(r[2:]) if r else "did not run"
            return [], ("bad_gold", {"error": f"test argument {expr!r} {why}; arguments must be plain data (no objects)"[:300]})
        try:
            out.append(shape(r[2])[0])  # checked here: only well-formed data goes on
        except Malformed as exc:
            return [], ("bad_gold", {"error": f"test argument {expr!r} is not plain data: {exc}"[:300]})
    return out, None


def run_asserts(program: str, plan: Plan, runs: Runs, names: set[str]) -> tuple[str, dict[str, Any]]:
    args, bad = _prep_args(plan, runs)
    if bad:
        return bad
    job = {
        "mode": "assert",
        "program": program,
        "setup": plan.cand_setup,
        "args": [None if i in plan.judge_only else a for i, a in enumerate(args)],
        "probes": plan.probes,
        "candidate_names": sorted(names),
    }
    res = runs.run(job)
    bad = failure(res)
    if bad:
        return bad
    try:
        recs = indexed(res, ("value", "error"), len(plan.probes))
        if len(recs) != len(plan.probes):
            return "runtime_error", {"error": "some tests did not run"}
        for k, r in sorted(recs.items()):
            if r[0] == "error":
                return "runtime_error", {"error": f"test expression {plan.probes[k]!r} raised {' '.join(r[2:])[:200]}"}
        values = [decode(recs[k][2]) for k in range(len(plan.probes))]
    except Malformed as exc:
        return "sandbox_violation", {"violation": str(exc)}
    verdicts = [fast_judge(j, values) for j in plan.judges]
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if todo:
        judge = {
            "mode": "judge",
            "setup": plan.setup,
            "exprs": [ast.unparse(plan.judges[i]) for i in todo],
            "values": [json.loads(recs[k][2]) for k in range(len(plan.probes))],  # as received: decoded only by the judge
            "args": args,  # an unrolled comprehension's loop bindings (from the prep run)
            "audit": False,
        }
        jr = runs.run(judge)
        if runs.spent:
            return "timeout", {"timeout": True, "budget_s": runs.total_s}
        try:
            got = {k: r[2] == "True" for k, r in indexed(jr, ("judged", "judged_error"), len(todo)).items() if r[0] == "judged"}
        except Malformed:
            got = {}
        for n, i in enumerate(todo):
            verdicts[i] = got.get(n, False)
    passed = sum(bool(v) for v in verdicts)
    if passed == len(verdicts):
        return "ok", {"passed": passed, "total": len(verdicts)}
    first = next(i for i, v in enumerate(verdicts) if not v)
    return "wrong", {"passed": passed, "total": len(verdicts), "error": f"failed: {plan.asserts[first]}"}
