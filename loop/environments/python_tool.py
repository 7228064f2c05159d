"""The built-in ``python`` tool environment: the model's fenced code runs in the code sandbox, its output comes back.

The last fenced python block of each assistant message runs; what it printed is the ``tool`` message; an assistant
message without a fenced block ends the episode.

The program runs under the code verifier's walls (``ratchet.verifiers.code.sandbox.run_job``: bubblewrap namespaces
with no network, a read-only runtime, a tmpfs work dir with a quota, rlimits, seccomp, a cgroup where one can be
had), each run a fresh process tree with a wall-clock limit. What it prints is hostile text: decoded with
replacement, cut to ``MAX_OUTPUT_CHARS``, and never parsed.
"""

from __future__ import annotations

from typing import Any

from ratchet.loop.environments.protocol import Message
from ratchet.verifiers.code._harness import VIOLATION_EXIT
from ratchet.verifiers.code.program import extract_code
from ratchet.verifiers.code.sandbox import Limits, RunResult, run_job

version = "1"
MAX_OUTPUT_CHARS = 4096  # a tool message's content at most (stdout then stderr), characters
TOOL_LIMITS = Limits(timeout_s=5.0, stdout_bytes=64 * 1024, stderr_bytes=16 * 1024, memory_bytes=512 * 1024**2)


def has_code_block(text: str) -> bool:
    """Whether an assistant message holds a fenced code block (a line starting with three backticks)."""
    return any(line.lstrip().startswith("```") for line in text.split("\n"))


def tool_output(res: RunResult, max_chars: int = MAX_OUTPUT_CHARS) -> str:
    """A run's result as a tool message's text: stdout, then stderr, then why it stopped, cut to ``max_chars``."""
    out = res.stdout.decode("utf-8", "replace")
    err = res.stderr.decode("utf-8", "replace")
    text = out + (("\n[stderr]\n" + err) if err.strip() else "")
    if res.timed_out:
        text += "\n[timed out]"
    elif res.memory_exceeded:
        text += "\n[memory limit exceeded]"
    elif res.output_exceeded or res.disk_exceeded:
        text += "\n[output limit exceeded]"
    elif res.returncode == VIOLATION_EXIT:
        text += "\n[stopped: the sandbox refused an operation]"
    elif res.returncode not in (0, None):
        text += f"\n[exit status {res.returncode}]"
    if len(text) > max_chars:
        text = text[: max_chars - 12] + "\n[truncated]"
    return text or "[no output]"


class PythonTool:
    """Run the model's fenced python in the sandbox and answer with its output (``environment = "python"``).

    ``reset``: the prompt as its source renders it. ``step``: the last fenced python block of the latest assistant
    message, run with ``limits`` (stdin empty), its bounded output as ``{"role": "tool", "content": ...}``; None
    (the episode ends) when that message has no fenced block.
    """

    version = version

    def __init__(self, limits: Limits = TOOL_LIMITS, isolation: str | None = None) -> None:
        self.limits, self.isolation = limits, isolation

    def reset(self, record: dict[str, Any]) -> list[Message] | None:
        return None

    def step(self, messages: list[Message]) -> Message | None:
        text = messages[-1]["content"]
        if not has_code_block(text):
            return None
        res = run_job({"mode": "stdio", "program": extract_code(text)}, self.limits, b"", isolation=self.isolation)
        return {"role": "tool", "content": tool_output(res)}
