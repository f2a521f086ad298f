"""Names seen lately: each one stays until it has not been seen for a window
(the splits an agent read, as the agent and the coordinator report them: a
micro-batch's tasks each touch some of them)."""

from __future__ import annotations

import time
from collections.abc import Iterable


class Recent:
    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        #: name -> when it was last seen (``time.monotonic``)
        self._seen: dict[str, float] = {}

    def touch(self, names: Iterable[str]) -> None:
        now = time.monotonic()
        self._seen.update((name, now) for name in names)

    def names(self) -> list[str]:
        """The names seen in the last ``window_s`` seconds, sorted; older
        ones are dropped."""
        horizon = time.monotonic() - self.window_s
        for name in [n for n, t in self._seen.items() if t < horizon]:
            del self._seen[name]
        return sorted(self._seen)
