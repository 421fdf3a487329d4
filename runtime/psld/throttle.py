"""Token-bucket bandwidth throttling inside a PS process (notes §7.2: ``tc`` needs NET_ADMIN and does
nothing on loopback, so a straggling PS is slowed in the application: each block it sends or receives
takes ``nbytes / rate`` of bucket time)."""

from __future__ import annotations

import time


class TokenBucket:
    """``rate`` bytes per second with a burst of ``burst`` bytes; ``rate=None`` disables throttling."""

    def __init__(self, rate: float | None, burst: float = 64 * 1024) -> None:
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.last = time.monotonic()

    def take(self, nbytes: float) -> float:
        """Block until ``nbytes`` may pass; returns the seconds slept."""
        if self.rate is None:
            return 0.0
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        if self.tokens >= 0:
            return 0.0
        wait = -self.tokens / self.rate
        time.sleep(wait)
        self.last = time.monotonic()
        self.tokens = 0.0
        return wait
