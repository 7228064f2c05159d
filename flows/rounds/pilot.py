"""The pilot ``ratchet run`` samples before a campaign's first round (``[preflight] pilot``).

A few of round 1's train prompts (``preflight.pilot_prompts``, more when ``group_size`` is small: at least 22 samples,
so that a true pass rate of 10% shows a correct one 90% of the time), ``group_size`` samples each, from the model that will generate (the base, or
``generation.teacher``), on an engine placed as a round's (``ratchet.flows.compute.engine``) and at its sampling settings and
cap, verified as the round would. Only when many are cut at the cap does it sample them once more with a longer cap
(``ratchet.loop.train.pilot_checks.probe_cap``) to name a cap that fits, so a pilot that finds nothing wrong costs one
small generate. Nothing is written to the store or the run dir. A source's own verifier whose calls end in
``verifier_error`` on most of the source's pilot samples stops the run before the first round (``PluginError``, one
line: the source, the verifier and the first error); one that merely judges them wrong is a normal verdict.
"""

from __future__ import annotations

import logging

from ratchet.common.seeds import derive_seed
from ratchet.flows.compute.engine import Placement, RoundEngine, open_engine
from ratchet.flows.compute.messages import engine_spec
from ratchet.flows.rounds.stages.pipeline import prompt_rows
from ratchet.flows.rounds.stages.round_engine import rank_groups
from ratchet.flows.rounds.state.phases import phase_contexts
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.checkpoints import resolve_model
from ratchet.loop.config import RatchetConfig
from ratchet.loop.evaluation.scoring import score_items
from ratchet.loop.generation.sampling import Completion, SamplingParams
from ratchet.loop.tasks.sources import Prompt
from ratchet.loop.train.lengths import round_max_new_tokens
from ratchet.loop.train.pilot_checks import TRUNCATED_SHARE, PilotResult, pilot_samples, probe_cap
from ratchet.verifiers.plugins import PluginError
from ratchet.verifiers.verdict import Verdict

logger = logging.getLogger(__name__)


def run_pilot(cfg: RatchetConfig) -> PilotResult | None:
    """Sample and score the pilot of ``cfg``'s first round; None when that round samples nothing (a cold-start sft
    stage trains on reference solutions) or only multi-turn episodes (sources with an ``environment``: not piloted).

    Raises:
        StageTimeout, WorkerFailed: as a round's generate stage (``ratchet.flows.compute.engine``).
        PluginError: a source's own verifier failed (``verifier_error``) on most of its samples (``broken_verifier``).
    """
    ctx = phase_contexts(cfg)[0]
    if ctx.cfg.algorithm == "sft":
        return None
    episodic = {s.source_name() for s in ctx.cfg.tasks.sources if s.environment}  # multi-turn: not a one-shot pilot's
    # enough samples that its 'nothing to train on' warning is right >= 90% of the time (pilot_checks.pilot_samples)
    wanted = max(cfg.preflight.pilot_prompts, -(-pilot_samples() // max(ctx.cfg.generation.group_size, 1)))
    prompts = [p for p in ctx.train_prompts() if p.source not in episodic][:wanted]
    if not prompts:
        return None
    cap = round_max_new_tokens(ctx.cfg, None)  # round 1's cap ('auto': its minimum)
    model = resolve_model(ctx.cfg.generation.teacher or ctx.cfg.model.name_or_path)
    g, compute = ctx.cfg.generation, ctx.cfg.compute
    placement = Placement(tuple(rank_groups(ctx.cfg)))
    with open_engine(engine_spec(model, g, ctx.cfg.model.dtype), placement, gen=g, compute=compute, log=logger) as engine:
        comps, rows = _sample(ctx, engine, prompts, cap)
        cut = sum(c.finish_reason == "length" for c in comps)
        probe, longer = cap, comps
        if comps and cut / len(comps) >= TRUNCATED_SHARE and probe_cap(cap) > cap:
            probe = probe_cap(cap)
            longer, _ = _sample(ctx, engine, prompts, probe)  # how long they wanted to be
    scored = score_items([c.text for c in comps], rows, ctx.reward)
    problem = broken_verifier(rows, scored, {s.source_name(): s.path for s in ctx.cfg.tasks.sources})
    if problem is not None:
        raise PluginError(problem)
    verdicts = [vd for _, vd in scored]
    return PilotResult(
        prompts=len(prompts),
        completions=comps,
        probe_completions=longer,
        correct=[vd.correct for vd in verdicts],
        reasons=[vd.reason for vd in verdicts],
        cap=cap,
        probe=probe,
        algorithm=ctx.cfg.algorithm,
        auto=ctx.cfg.generation.max_new_tokens == "auto",
    )


def _sample(ctx: Ctx, engine: RoundEngine, prompts: list[Prompt], cap: int) -> tuple[list[Completion], list[dict]]:
    """``group_size`` samples of each prompt at round 1's rollout settings with ``cap`` tokens at most, and one prompt
    row per completion (for the verifier)."""
    g = ctx.cfg.generation
    comps: list[Completion] = []
    rows: list[dict] = []
    for G, subset in sorted(ctx.tasks.group_sizes(prompts, g.group_size).items()):
        params = SamplingParams(
            n=G,
            temperature=ctx.cfg.rollout_temperature,
            top_p=g.top_p,
            max_new_tokens=cap,
            seed=derive_seed("rollouts", g.seed, 1, 0),  # round 1's rollout seed
            stop=g.stop,
        )
        got = engine.generate([ctx.messages(p) for p in subset], params, "pilot")
        comps += got
        rows += [prompt_rows([subset[c.prompt_index]])[0] for c in got]
    return comps, rows


def broken_verifier(
    rows: list[dict], scored: list[tuple[str, Verdict]], paths: dict[str, str] | None = None, share: float = 0.5
) -> str | None:
    """One line naming a source whose own verifier ended in ``verifier_error`` on more than ``share`` of its samples
    (the source, the verifier, the count and the first error, and how to check it: ``paths`` gives each source's task
    file), or None."""
    by_source: dict[str, list[Verdict]] = {}
    names: dict[str, str] = {}
    for row, (name, vd) in zip(rows, scored):
        if name.startswith("plugin:"):
            by_source.setdefault(str(row.get("source")), []).append(vd)
            names[str(row.get("source"))] = name
    for source, vds in by_source.items():
        errors = [v for v in vds if v.reason == "verifier_error"]
        if len(errors) > share * len(vds):
            ref = names[source].removeprefix("plugin:")
            return (
                f"pilot: the verifier {ref!r} of tasks source {source!r} failed on {len(errors)}/{len(vds)} samples "
                f"(first: {errors[0].details.get('error', '?')}); fix it, then check it with `ratchet tasks check "
                f"{(paths or {}).get(source, 'FILE')} --verifier {ref}`"
            )
    return None
