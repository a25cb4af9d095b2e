"""Backoff policies: bounds, means and growth per jitter kind, with seeded randomness."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratelimit import Backoff

SAMPLES = 4_000


def delays_at(policy: Backoff, retry: int, seed: int = 7) -> list[float]:
    """Many draws of the delay before ``retry``, each from a fresh sequence."""
    rng = random.Random(seed)
    out = []
    for _ in range(SAMPLES):
        out.append(next(itertools.islice(policy.delays(rng), retry - 1, None)))
    return out


def test_no_jitter_is_the_exponential_sequence_capped() -> None:
    policy = Backoff(base=0.5, multiplier=2, max_delay=5, jitter="none")
    assert list(itertools.islice(policy.delays(), 6)) == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]


def test_multiplier_one_is_a_constant_delay() -> None:
    policy = Backoff(base=0.3, multiplier=1, max_delay=1, jitter="none")
    assert list(itertools.islice(policy.delays(), 4)) == [0.3] * 4


def test_huge_retry_numbers_stay_at_the_cap_without_overflow() -> None:
    policy = Backoff(base=0.1, multiplier=10, max_delay=60, jitter="none")
    assert policy.ceiling(10_000) == 60
    assert policy.delay(10_000, None, random.Random(1)) == 60


@pytest.mark.parametrize("retry", [1, 3, 6])
def test_full_jitter_is_uniform_up_to_the_delay(retry: int) -> None:
    policy = Backoff(base=0.2, multiplier=2, max_delay=100, jitter="full")
    ceiling = policy.ceiling(retry)
    draws = delays_at(policy, retry)
    assert all(0 <= d <= ceiling for d in draws)
    # Uniform on [0, c]: mean c/2, and both ends of the range are reached.
    assert statistics.fmean(draws) == pytest.approx(ceiling / 2, rel=0.05)
    assert min(draws) < 0.05 * ceiling
    assert max(draws) > 0.95 * ceiling


@pytest.mark.parametrize("retry", [1, 4])
def test_equal_jitter_keeps_at_least_half(retry: int) -> None:
    policy = Backoff(base=0.2, multiplier=3, max_delay=100, jitter="equal")
    ceiling = policy.ceiling(retry)
    draws = delays_at(policy, retry)
    assert all(ceiling / 2 <= d <= ceiling for d in draws)
    assert statistics.fmean(draws) == pytest.approx(0.75 * ceiling, rel=0.03)


def test_jittered_means_grow_by_the_multiplier_until_the_cap() -> None:
    policy = Backoff(base=0.1, multiplier=2, max_delay=1.0, jitter="full")
    means = [statistics.fmean(delays_at(policy, retry)) for retry in (1, 2, 3, 4)]
    for earlier, later in itertools.pairwise(means):
        assert later / earlier == pytest.approx(2.0, rel=0.08)
    # From retry 5 on the ceiling is the cap: the mean stops growing at max_delay / 2.
    assert statistics.fmean(delays_at(policy, 7)) == pytest.approx(0.5, rel=0.05)


def test_decorrelated_never_below_base_never_above_the_cap() -> None:
    policy = Backoff(base=0.5, multiplier=2, max_delay=8, jitter="decorrelated")
    rng = random.Random(3)
    for _ in range(200):
        sequence = list(itertools.islice(policy.delays(rng), 12))
        assert all(0.5 <= d <= 8 for d in sequence)


def test_decorrelated_grows_from_the_previous_delay() -> None:
    policy = Backoff(base=1.0, multiplier=2, max_delay=1_000, jitter="decorrelated")
    rng = random.Random(11)
    # uniform(base, 3 * previous): the mean of the next delay is (base + 3 * previous) / 2.
    draws = [policy.delay(2, 10.0, rng) for _ in range(SAMPLES)]
    assert all(1.0 <= d <= 30.0 for d in draws)
    assert statistics.fmean(draws) == pytest.approx(15.5, rel=0.03)
    # The first retry starts from previous = base.
    first = [policy.delay(1, None, rng) for _ in range(SAMPLES)]
    assert all(1.0 <= d <= 3.0 for d in first)


def test_the_same_seed_gives_the_same_delays() -> None:
    policy = Backoff(jitter="decorrelated")
    one = list(itertools.islice(policy.delays(random.Random(42)), 10))
    two = list(itertools.islice(policy.delays(random.Random(42)), 10))
    assert one == two
    assert one != list(itertools.islice(policy.delays(random.Random(43)), 10))


@given(
    base=st.floats(0.001, 10),
    multiplier=st.floats(1, 10),
    extra=st.floats(0, 100),
    jitter=st.sampled_from(["none", "full", "equal", "decorrelated"]),
    seed=st.integers(0, 2**32),
)
def test_no_delay_ever_exceeds_max_delay_or_goes_negative(
    base: float, multiplier: float, extra: float, jitter: str, seed: int
) -> None:
    policy = Backoff(base=base, multiplier=multiplier, max_delay=base + extra, jitter=jitter)  # type: ignore[arg-type]
    for d in itertools.islice(policy.delays(random.Random(seed)), 40):
        assert 0 <= d <= policy.max_delay
        if jitter == "decorrelated":
            assert d >= base


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"base": 0}, ValueError, "base must be > 0"),
        ({"base": "1"}, TypeError, "base must be a number"),
        ({"multiplier": 0.5}, ValueError, "multiplier must be a finite number >= 1, got 0.5"),
        ({"multiplier": True}, TypeError, "multiplier must be a number"),
        ({"max_delay": 0.01, "base": 1}, ValueError, r"max_delay must be >= base \(1\), got 0.01"),
        ({"jitter": "rand"}, ValueError, "jitter must be one of 'none', 'full', 'equal', 'decorrelated', got 'rand'"),
    ],
)
def test_bad_policies_are_refused_naming_the_argument(kwargs: dict[str, object], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_a_policy_is_a_small_immutable_value() -> None:
    policy = Backoff(base=1, jitter="none")
    assert policy == Backoff(base=1, jitter="none")
    with pytest.raises(AttributeError):
        policy.base = 2  # type: ignore[misc]
    with pytest.raises(ValueError, match="retry must be >= 1"):
        policy.ceiling(0)
