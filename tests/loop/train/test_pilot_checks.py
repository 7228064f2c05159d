"""The pilot's findings from hand-made samples (issue 24: what will waste the night, one line each)."""

from ratchet.loop.generation.sampling import Completion
from ratchet.loop.train.pilot_checks import PilotResult, fitting_cap, probe_cap

EOS = 2


def comp(n_tokens: int, stopped: bool, text: str = "Answer: 5") -> Completion:
    """A completion of ``n_tokens`` tokens (its last one EOS when it ``stopped``, else cut at the cap)."""
    ids = tuple([5] * (n_tokens - 1) + [EOS if stopped else 5])
    return Completion(0, 0, text, ids, 10, "stop" if stopped else "length")


def result(comps, correct, reasons, probe_comps=None, cap=32, algorithm="rft", auto=False) -> PilotResult:
    probe = probe_cap(cap) if probe_comps is not None else cap
    return PilotResult(1, comps, probe_comps or comps, correct, reasons, cap, probe, algorithm, auto)


def test_probe_cap_and_the_cap_that_fits():
    assert probe_cap(32) == 128 and probe_cap(256) == 512 and probe_cap(600) == 600
    assert fitting_cap([comp(n, True) for n in (10, 20, 30, 40, 50, 60, 70, 80, 90, 100)]) == 108  # 1.2 x P90 (90)
    assert fitting_cap([comp(128, False)] * 2 + [comp(10, True)] * 8) is None  # 20% never stopped


def test_cut_completions_name_a_cap_that_fits():
    cut, longer = [comp(32, False)] * 4, [comp(90, True)] * 4
    w = result(cut, [False] * 4, ["wrong"] * 4, probe_comps=longer).warnings()
    assert w[0] == (
        "pilot: 4/4 completions are cut at max_new_tokens = 32 (truncated answers verify as wrong); "
        "set generation.max_new_tokens = 108 (and sft.max_seq_len to match)"
    )
    w = result(cut, [True] * 4, ["ok"] * 4, probe_comps=longer, auto=True).warnings()
    assert w == [w[0]] and "set generation.max_new_tokens_min = 108" in w[0]
    w = result(cut, [True] * 4, ["ok"] * 4, probe_comps=[comp(128, False)] * 4).warnings()
    assert "they run past 128 tokens: raise generation.max_new_tokens a lot" in w[0]
    assert result([comp(32, False)] + [comp(8, True)] * 4, [True] * 5, ["ok"] * 5).warnings() == []  # 1 in 5 cut: < 25%


def test_nothing_right_and_nothing_parseable():
    comps = [comp(8, True, "I think it is big")] * 3
    w = result(comps, [False] * 3, ["no_answer", "no_answer", "parse_error"], algorithm="grpo").warnings()
    assert len(w) == 2
    assert w[0].startswith("pilot: 0/3 verified correct on 1 train prompt(s): the true base rate could still be up to ~63%")
    assert "GRPO will likely find few correct rollouts" in w[0] and "verdicts: no_answer 2, parse_error 1" in w[0]
    assert "e.g. 'I think it is big'" in w[0] and w[0].endswith("or use a teacher (generation.teacher)")
    assert "none of the 3 completions has a parseable answer (e.g. 'I think it is big')" in w[1]
    assert len(result(comps, [False] * 3, ["wrong"] * 3).warnings()) == 1  # answers read, all wrong: one line
    s = result(comps, [False, True, False], ["wrong", "ok", "wrong"]).summary()
    assert s == (
        "pilot: 1 train prompt(s) x 3 samples of the base model: 1/3 verified correct (the true rate could be 6%-79%, "
        "95%), 0/3 cut at max_new_tokens = 32; verdicts: wrong 2, ok 1"
    )


def test_the_zero_rate_warning_carries_its_evidence_and_its_sample_is_sized_to_be_right():
    """Issue 42, finding 4: '0/16' is said with its uncertainty (the true rate could still be ~17%), and the pilot
    samples enough that a true rate of 10% shows a correct sample >= 90% of the time."""
    from ratchet.loop.train.pilot_checks import FEW_RATE, WRONG_WARNING, pilot_samples, rate_upper_bound

    assert abs(rate_upper_bound(0, 16) - (1 - 0.05 ** (1 / 16))) < 1e-9 and round(rate_upper_bound(0, 16), 2) == 0.17
    assert 0.25 < rate_upper_bound(3, 20) < 0.35 and rate_upper_bound(5, 5) == 1.0  # exact CP: 3/20 -> 0.34
    n = pilot_samples()
    assert n == 22 and (1 - FEW_RATE) ** n <= WRONG_WARNING < (1 - FEW_RATE) ** (n - 1)
    w = result([comp(8, True, "Answer: 3")] * 16, [False] * 16, ["wrong_answer"] * 16).warnings()
    assert "0/16 verified correct" in w[0] and "up to ~17% (95% bound)" in w[0] and "81% of the time" in w[0]
