"""Bandwidth and CPU throttling inside a PS process (``tc`` needs NET_ADMIN and does
nothing on loopback, so a straggling PS is slowed in the application).

``Link`` is one direction of an emulated NIC ([PSLD] §6.1 caps a server's link with ``tc``): a FIFO with
its own clock. ``runtime.psld.ps.run_server`` keeps one per direction, each used from its own thread, so
receiving, summing and sending overlap as on a full-duplex NIC. ``TokenBucket`` paces a CPU straggler's
summing."""

from __future__ import annotations

import math
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


class Link:
    """One direction of an emulated NIC: a FIFO link of ``rate`` bytes/s with its own clock.

    ``carry(nbytes, ready_at)`` starts the bytes when both the link is free and the data was there
    (``ready_at``, on ``time.monotonic``'s clock), and returns when they are through. The clock is the
    link's own (``free_at``), not the caller's: a thread that wakes up late from its sleep does not
    make the next message later, so on a busy host the emulated link keeps its rate, where a token
    bucket with a small burst loses every late wake-up. An idle link banks nothing, because a message
    never starts before its ``ready_at``. ``rate=None`` disables it."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.free_at = -math.inf

    def carry(self, nbytes: float, ready_at: float) -> float:
        """Block until ``nbytes`` that were ready at ``ready_at`` are through; returns the seconds slept."""
        if self.rate is None:
            return 0.0
        self.free_at = max(self.free_at, ready_at) + nbytes / self.rate
        wait = self.free_at - time.monotonic()
        if wait <= 0:
            return 0.0
        time.sleep(wait)
        return wait
