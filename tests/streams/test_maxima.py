"""``RunningMaxima`` answers as a scan of every value since the key would, in any order of questions."""

from __future__ import annotations

import random

from exporter.streams.maxima import RunningMaxima


def test_the_largest_since_any_key_is_a_scans_answer() -> None:
    rng = random.Random(3)
    maxima, given = RunningMaxima(), list[tuple[float, float]]()
    key = 0.0
    for _ in range(2000):
        key += rng.choice([0.0, 0.5, 1.0])  # the same key again: its value grows, as a sample's does
        value = rng.random()
        if given and given[-1][0] == key:
            value = max(value, given[-1][1])
            given[-1] = (key, value)
        else:
            given.append((key, value))
        maxima.add(key, value)
        asked = rng.uniform(0.0, key + 1.0)
        assert maxima.since(asked, default=-1.0) == max((v for k, v in given if k >= asked), default=-1.0)
    maxima.drop_before(key / 2)
    assert maxima.since(key / 2) == max(v for k, v in given if k >= key / 2)
    assert maxima.since(key + 1) == 0.0  # nothing since: the default
    assert len(maxima) == len(
        {k for k, v in given if k >= key / 2 and v >= max(w for j, w in given if j >= k)}
    )
