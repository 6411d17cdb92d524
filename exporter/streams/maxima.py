"""``RunningMaxima``: the largest value given at or after any key, in logarithmic time, whatever the
number of values.

Where it serves: the probe asks, at the end of every request, how late its loop or its reads were
since the request began (``socket_reads.LateReads`` by time, ``saturation.LagMonitor`` by sample
number), and a scan of everything since would cost as much as the request has been long.
"""

from __future__ import annotations

import bisect


class RunningMaxima:
    """Values at keys that never decrease. Only the running maxima from the end are kept (a value
    drops every earlier one no larger than it), so the largest since any key is the first kept at or
    after it, however long ago that was; giving the last key again a larger value replaces its own."""

    __slots__ = ("_keys", "_values")

    def __init__(self) -> None:
        self._keys: list[float] = []  # increasing
        self._values: list[float] = []  # decreasing

    def add(self, key: float, value: float) -> None:
        """``value`` at ``key``, no smaller than any key given before."""
        keys, values = self._keys, self._values
        while values and values[-1] <= value:
            keys.pop()
            values.pop()
        keys.append(key)
        values.append(value)

    def since(self, key: float, default: float = 0.0) -> float:
        """The largest value at ``key`` or after (``default``: none)."""
        keys = self._keys
        if not keys or keys[-1] < key:
            return default  # the usual answer where values are rare
        return self._values[bisect.bisect_left(keys, key)]

    def __len__(self) -> int:
        """How many values are kept (each one larger than every value after it)."""
        return len(self._keys)

    def drop_before(self, key: float) -> None:
        """Forget the values before ``key`` (none of them is asked for again)."""
        first = bisect.bisect_left(self._keys, key)
        del self._keys[:first]
        del self._values[:first]
