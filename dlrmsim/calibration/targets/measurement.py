"""How a validation target's training step is timed: samples long enough to average out scheduler ticks.

A sample loops whole steps until it has lasted at least ``min_sample_s`` (tens of milliseconds: a 250 Hz
kernel tick is 4 ms, so one tick lands on a sample as a few percent at most), samples repeat, and a
measurement keeps every sample so the median and its spread travel with the number.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepMeasurement:
    """Seconds per training step of one implementation: the median of ``samples_s`` and their spread."""

    target: str  # which implementation and path, e.g. "torchrec/fused", "reference"
    threads: int
    batch: int
    samples_s: tuple[float, ...]
    steps_per_sample: int

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def spread(self) -> float:
        """(p90 - p10) / median of the samples: how far one sample may land from the median (a fraction)."""
        q = np.quantile(self.samples_s, [0.1, 0.9])
        return float((q[1] - q[0]) / self.median_s)


def time_samples(step: Callable[[int], None], samples: int, min_sample_s: float, warmup_steps: int) -> tuple[list[float], int]:
    """Per-step seconds of ``samples`` samples of ``step(i)``; each sample runs as many steps as fill
    ``min_sample_s``, a count fixed from the warm-up so every sample does the same work."""
    t0 = time.perf_counter()
    for i in range(warmup_steps):
        step(i)
    per_step = (time.perf_counter() - t0) / max(warmup_steps, 1)
    k = max(1, int(np.ceil(min_sample_s / max(per_step, 1e-6))))
    out = []
    for s in range(samples):
        t0 = time.perf_counter()
        for i in range(k):
            step(warmup_steps + s * k + i)
        out.append((time.perf_counter() - t0) / k)
    return out, k


def per_step_samples(step_times_s: list[float], min_sample_s: float) -> tuple[list[float], int]:
    """Group consecutive per-step times (as an implementation prints them) into samples of at least
    ``min_sample_s``; returns the per-step mean of each complete sample and the steps per sample."""
    if not step_times_s:
        return [], 0
    k = max(1, int(np.ceil(min_sample_s / max(statistics.median(step_times_s), 1e-9))))
    n = len(step_times_s) // k
    return [sum(step_times_s[i * k : (i + 1) * k]) / k for i in range(n)], k
