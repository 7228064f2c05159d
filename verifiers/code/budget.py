"""Every sandboxed run of one verification under one wall-time budget, and what a failed trusted run means."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from ratchet.verifiers.code.sandbox import Limits, RunResult, run_job


class Runs:
    """Every sandboxed run of one verification, under one wall-time budget (issue 22, class 3).

    Each run gets ``limits.timeout_s`` or what is left of ``limits.total_s`` (default twice
    ``timeout_s``), whichever is less; once the budget is spent no run starts and the verification's
    verdict is ``timeout``, so a task with many cases costs at most ``total_s``, not cases x timeout.
    """

    def __init__(self, limits: Limits, isolation: str) -> None:
        self.limits, self.isolation = limits, isolation
        self.total_s = limits.total_s if limits.total_s is not None else 2 * limits.timeout_s
        self.deadline = time.monotonic() + self.total_s
        self.spent = False

    def run(self, job: dict, stdin: bytes = b"") -> RunResult:
        left = self.deadline - time.monotonic()
        if left <= 0.05:
            self.spent = True
            return RunResult(timed_out=True, isolation=self.isolation)
        timeout = min(self.limits.timeout_s, left)
        res = run_job(job, dataclasses.replace(self.limits, timeout_s=timeout, cpu_s=None), stdin, isolation=self.isolation)
        if res.timed_out and timeout < self.limits.timeout_s:
            self.spent = True
        return res


def trusted_failure(runs: Runs, what: str, bad: tuple[str, dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """A trusted run (no model code) failed: the task's fault, unless the verification's budget ran out."""
    if runs.spent:
        return "timeout", {"timeout": True, "budget_s": runs.total_s}
    return "bad_gold", {"error": f"{what} failed in a run without the program: {bad[0]} {bad[1]}"[:300]}
