"""A year of nights: 500 campaigns of 200 nightly rounds each on 400 pinned gating prompts, decided by the real
``ratchet.loop.gate.decide`` under the default ``[gate]`` (``ratchet.loop.gate.longrun``).

Each candidate's true change against its incumbent is drawn independently from N(-0.005, 0.02²); candidate and
incumbent disagree on 20% of prompts; a second slice of 200 prompts, the confirmation set, is read only when a
candidate is promoted. A halt is resumed the next night. Prints one JSON line:

- ``true_drift_p05``: 5th percentile over campaigns of the final incumbent's true pass@1 change from the base
  (target >= -0.03: the campaign does not slide),
- ``reported_bias``: mean of the final incumbent's gating-slice pass@1 minus its true pass@1 (the winner's curse of
  a score that selected it),
- ``confirmed_bias``: the same on the confirmation slice (target |.| <= 0.01),

with ``--refresh-after N`` the gating slice is replaced by fresh prompts after every N promotions.

    python benchmarks/gate_longrun.py [--campaigns 500] [--rounds 200] [--refresh-after N] [--seed 0]

~25 s on one core at the defaults.
"""

from __future__ import annotations

import argparse
import json
import time

from ratchet.loop.config import GateConfig
from ratchet.loop.gate.longrun import simulate_long_campaign, summarize


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--campaigns", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--gating", type=int, default=400, help="pinned gating prompts")
    ap.add_argument("--confirmation", type=int, default=200, help="confirmation prompts, read only on promotion")
    ap.add_argument("--delta-mean", type=float, default=-0.005)
    ap.add_argument("--delta-sd", type=float, default=0.02)
    ap.add_argument("--discordance", type=float, default=0.2)
    ap.add_argument("--refresh-after", type=int, default=None, help="fresh gating slice after this many promotions")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    cfg = GateConfig()
    t0 = time.perf_counter()
    runs = [
        simulate_long_campaign(
            cfg,
            rounds=a.rounds,
            gating=a.gating,
            confirmation=a.confirmation,
            delta_mean=a.delta_mean,
            delta_sd=a.delta_sd,
            discordance=a.discordance,
            refresh_after=a.refresh_after,
            seed=a.seed * 100003 + i,
        )  # fmt: skip
        for i in range(a.campaigns)
    ]
    out = {
        **summarize(runs),
        "rounds": a.rounds,
        "gating_prompts": a.gating,
        "confirmation_prompts": a.confirmation,
        "delta": [a.delta_mean, a.delta_sd],
        "discordance": a.discordance,
        "refresh_after": a.refresh_after,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
