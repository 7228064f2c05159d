"""Prompt selection (``tasks.selection``): the Beta posterior, the informative score, the ranked slots, refill."""

import math
import random

import pytest

from ratchet.common.seeds import derive_seed
from ratchet.loop.campaign.round_context import Ctx
from ratchet.loop.config import RatchetConfig
from ratchet.loop.tasks.picking import (
    History,
    estimate,
    informative_probability,
    posterior,
    prior_mean,
    rank_frontier,
    refill,
)
from ratchet.loop.tasks.sources import make_prompt, normalize_question


def _prompts(n: int, task: str = "t"):
    return [make_prompt("src", task, f"What is {i} + {i}?", str(2 * i), 0.0, split="train") for i in range(n)]


def test_posterior_and_informative_probability_by_hand():
    # prior Beta(1, 1) (mean 1/2, strength 2) after 3 of 4 right: Beta(4, 2), mean 2/3
    a, b = posterior((4, 3), 0.5, 2.0)
    assert (a, b) == (4.0, 2.0)
    # G = 2: E[p^2] = 4*5 / (6*7) = 20/42, E[(1-p)^2] = 2*3 / 42 = 6/42 -> 1 - 26/42
    assert informative_probability(a, b, 2) == pytest.approx(16 / 42)
    # a certain p (huge counts) gives the binomial's 1 - p^G - (1-p)^G
    a, b = posterior((10**6, 5 * 10**5), 0.5, 2.0)
    assert informative_probability(a, b, 4) == pytest.approx(1 - 0.5**4 - 0.5**4, abs=1e-5)
    assert prior_mean(None) == 0.5 and prior_mean((8, 2)) == pytest.approx(0.3)
    with pytest.raises(ValueError, match="correct <= rollouts"):
        posterior((2, 3), 0.5, 2.0)


def test_informative_score_prefers_the_frontier_over_solved_and_unsolved():
    ps = _prompts(3)
    h = History({ps[0].prompt_id: (12, 12), ps[1].prompt_id: (12, 6), ps[2].prompt_id: (12, 0)}, {("src", "t"): (36, 18)})
    solved, frontier, unsolved = (estimate(p, h, 4, 2.0, "frontier") for p in ps)
    assert frontier.informative > 0.8 and solved.informative < 0.4 and unsolved.informative < 0.4
    assert solved.estimate > 0.9 and unsolved.estimate < 0.1 and frontier.estimate == pytest.approx(0.5)


def test_unseen_prompts_take_their_source_and_task_prior():
    easy, hard = _prompts(1, "easy")[0], _prompts(1, "hard")[0]
    h = History({}, {("src", "easy"): (100, 98), ("src", "hard"): (100, 40)})
    e, d = estimate(easy, h, 4, 2.0, "frontier"), estimate(hard, h, 4, 2.0, "frontier")
    assert e.seen == d.seen == (0, 0)
    assert e.estimate == pytest.approx(99 / 102) and d.estimate == pytest.approx(41 / 102)
    assert d.informative > e.informative


def test_frontier_ranking_is_deterministic_explores_and_ignores_input_order():
    ps = _prompts(40)
    rng = random.Random(1)
    h = History({p.prompt_id: (8, rng.randint(0, 8)) for p in ps}, {("src", "t"): (320, 160)})
    kw = dict(group_size=4, explore=0.25, seed=7, strength=2.0)
    a = rank_frontier(ps, 8, h, **kw)
    b = rank_frontier(list(reversed(ps)), 8, h, **kw)
    assert [c.prompt.prompt_id for c in a] == [c.prompt.prompt_id for c in b]
    assert [c.pick for c in a[:8]] == ["frontier"] * 6 + ["explore"] * 2
    assert all(c.pick == "reserve" for c in a[8:]) and len(a) == 40
    top = sorted(a, key=lambda c: -c.informative)[:6]
    assert {c.prompt.prompt_id for c in a[:6]} == {c.prompt.prompt_id for c in top}
    assert [c.prompt.prompt_id for c in rank_frontier(ps, 8, h, **{**kw, "seed": 8})] != [c.prompt.prompt_id for c in a]


def _cfg(**over) -> RatchetConfig:
    return RatchetConfig.model_validate({"campaign": "sel", **over})


def test_round_slots_never_hold_an_eval_question_and_split_over_steps():
    cfg = _cfg(
        algorithm="grpo",
        tasks={"selection": "frontier", "train_prompts_per_round": 12, "heldout_prompts": 16},
        grpo={"steps_per_round": 3, "max_oversample": 0.5},
    )
    ctx = Ctx(cfg, round_index=2)
    banned = {normalize_question(p.question) for p in ctx.heldout()}
    slots = ctx.round_slots(History.empty())
    picked = [x for x in slots if x.choice.pick != "reserve"]
    assert len(picked) == 12 and len([x for x in slots if x.choice.pick == "reserve"]) == 6 == ctx.refill_reserve
    assert [sum(x.step == s for x in picked) for s in range(3)] == [4, 4, 4]
    assert all(x.choice.prompt.split == "train" for x in slots)
    assert banned.isdisjoint(normalize_question(x.choice.prompt.question) for x in slots)
    assert len({x.choice.prompt.prompt_id for x in slots}) == len(slots)
    again = Ctx(cfg, round_index=2).round_slots(History.empty())
    assert [(x.step, x.choice.prompt.prompt_id) for x in again] == [(x.step, x.choice.prompt.prompt_id) for x in slots]


def test_uniform_slots_are_todays_train_prompts():
    cfg = _cfg(tasks={"train_prompts_per_round": 10, "heldout_prompts": 8})
    ctx = Ctx(cfg, round_index=3)
    slots = ctx.round_slots(History.empty())
    assert [x.choice.prompt for x in slots] == ctx.train_prompts()
    assert {x.choice.pick for x in slots} == {"uniform"} and ctx.refill_reserve == 0


def test_frontier_picks_the_prompts_the_history_shows_at_the_frontier():
    cfg = _cfg(tasks={"selection": "frontier", "train_prompts_per_round": 8, "heldout_prompts": 8, "selection_explore": 0.0})
    ctx = Ctx(cfg, round_index=2)
    cands = ctx.tasks.draw(8 * cfg.tasks.selection_candidates, "train", derive_seed("train_prompts", 0, 2))
    rng = random.Random(0)
    counts = {p.prompt_id: (8, rng.choice([0, 8])) for p in cands}  # solved or unsolved ...
    middle = {p.prompt_id for p in cands[3::4]}  # ... except these, right half the time
    counts |= {pid: (8, 4) for pid in middle}
    picked = [x.choice for x in ctx.round_slots(History(counts, {})) if x.choice.pick != "reserve"]
    assert {c.prompt.prompt_id for c in picked} == middle
    assert all(c.seen == (8, 4) and c.estimate == pytest.approx(0.5) for c in picked)
    uniform = Ctx(_cfg(tasks={"train_prompts_per_round": 8, "heldout_prompts": 8}), round_index=2)
    assert {x.choice.prompt.prompt_id for x in uniform.round_slots(History(counts, {}))} != middle


@pytest.mark.parametrize("ratio", [0.0, 0.25, 1.0, 3.0])
def test_refill_never_exceeds_max_oversample(ratio):
    """Every group zero-variance: refill draws until the reserve (max_oversample x the round's prompts) is spent."""
    cfg = _cfg(
        algorithm="grpo",
        tasks={"selection": "frontier", "train_prompts_per_round": 8, "heldout_prompts": 8},
        grpo={"steps_per_round": 2, "max_oversample": ratio},
    )
    ctx = Ctx(cfg, round_index=1)
    slots = ctx.round_slots(History.empty())
    total = 0
    for step in range(2):
        mine = [x.choice for x in slots if x.step == step]
        taken = refill(
            [c for c in mine if c.pick != "reserve"], [c for c in mine if c.pick == "reserve"], lambda b, _k: [False] * len(b)
        )
        total += sum(k > 0 for _, k in taken)
        assert len({c.prompt.prompt_id for c, _ in taken}) == len(taken)
    assert total == ctx.refill_reserve == math.floor(ratio * 8)


def test_refill_stops_when_the_batch_is_full():
    ps = [estimate(p, History.empty(), 4, 2.0, "frontier") for p in _prompts(20)]
    calls = []

    def signal(batch, k):  # the first two of the first batch drop; every refill carries signal
        calls.append((len(batch), k))
        return [i >= 2 for i in range(len(batch))] if k == 0 else [True] * len(batch)

    taken = refill(ps[:6], ps[6:], signal)
    assert calls == [(6, 0), (2, 1)] and [k for _, k in taken] == [0] * 6 + [1, 1]


def test_settings_that_do_nothing_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="dynamic_sampling = false drops none"):
        _cfg(algorithm="grpo", grpo={"dynamic_sampling": False, "max_oversample": 1.0})
    with pytest.raises(ValueError, match="set algorithm = 'rft' or sft.rationalization = false"):
        _cfg(algorithm="grpo", sft={"rationalization": True})
    with pytest.raises(ValueError, match="selection"):
        _cfg(tasks={"selection": "best"})
