"""The ``ratchet`` command line: ``commands`` wires the app from one module per command group, in three packages:
``running`` (demo, run, check; up, init, schedule; campaign; sweep), ``reading`` (status, report, sql, export, track,
gate) and ``inputs`` (model pull, tasks check, reverify, audit); ``common`` holds what every command shares."""

from __future__ import annotations

from ratchet.flows.cli.commands import app, main

__all__ = ["app", "main"]
