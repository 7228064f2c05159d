import pytest

from ratchet.flows.rounds.campaign import _gate_scores

ROWS = [dict(greedy_correct=True, n=4, c=1), dict(greedy_correct=False, n=4, c=3)]


def test_gate_scores_greedy_or_sample_means():
    assert _gate_scores(ROWS, 0) == [1.0, 0.0]
    assert _gate_scores(ROWS, 4) == [0.25, 0.75]
    with pytest.raises(ValueError, match="eval.num_samples >= 8"):
        _gate_scores(ROWS, 8)
