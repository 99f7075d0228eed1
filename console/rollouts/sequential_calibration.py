"""Calibration of the rollback triggers' sequential test by simulation with a known truth.

    python -m console.rollouts.sequential_calibration [--sims N] [--looks K] [--seed S] [--alpha A]

Simulates N rollouts of K looks per scenario (one observation per look, the truth known), runs the
test every look, and prints a Markdown table: how often each method declares a breach within K
looks (a false alarm when the truth is on the OK side or at the threshold, a detection when it is
beyond), with a 95% Wilson interval, and the chosen method's median look of detection. Three
methods on the same paths:

* **t-mixture**: ``console.rollouts.sequential`` (the one the evaluator runs);
* **plug-in mixture**: the same one-sided normal mixture with the sample SD plugged in as if it
  were the true SD (the textbook mSPRT with an estimated variance), from look ``max(3, 2)``;
* **naive t**: a one-sided t-test at level alpha repeated at every look from look 3.

Noise is in units of its own SD; ``op ">"`` scenarios put the threshold at 1 (a latency
difference), ``op "<"`` ones at 0.6 with noise SD 0.05 (an acceptance rate), so the table also
shows the test does not care about the unit. Paths are simulated in chunks to bound memory
(about 40 MB a chunk at 500 looks).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from console.rollouts.sequential import EFFECT_SCALE, first_breach

FloatArray = npt.NDArray[np.float64]
Noise = Callable[[np.random.Generator, int, int], FloatArray]
CHUNK = 10_000  # rollouts simulated at once
AR_RHO = 0.3
FIRST_LOOK = 3  # min_samples of every method
EARLY = 30  # a second horizon for the t-mixture's breach rate, in looks


def normal_noise(rng: np.random.Generator, sims: int, looks: int) -> FloatArray:
    return rng.standard_normal((sims, looks))


def _lognormal(rng: np.random.Generator, sims: int, looks: int, sigma: float) -> FloatArray:
    raw = np.exp(sigma * rng.standard_normal((sims, looks)))
    return (raw - math.exp(sigma * sigma / 2)) / math.sqrt(
        (math.exp(sigma * sigma) - 1) * math.exp(sigma * sigma)
    )


def lognormal_noise(sigma: float) -> Noise:
    """Right-skewed, mean 0, SD 1: a centred, scaled lognormal of log-scale SD ``sigma`` (the shape of
    one pool's per-window p95; skewness 1.75 at sigma 0.5, 6.2 at sigma 1)."""
    return lambda rng, sims, looks: _lognormal(rng, sims, looks, sigma)


def lognormal_difference_noise(sigma: float) -> Noise:
    """Candidate minus control, each pool's noise an independent ``lognormal_noise(sigma)``: mean 0,
    SD 1, symmetric (what a ``compare="control"`` trigger sees when the pools are alike)."""
    return lambda rng, sims, looks: (
        (_lognormal(rng, sims, looks, sigma) - _lognormal(rng, sims, looks, sigma)) / math.sqrt(2)
    )


def ar1_noise(rng: np.random.Generator, sims: int, looks: int) -> FloatArray:
    """Stationary AR(1) with lag-1 correlation ``AR_RHO`` and marginal SD 1 (windows that share load)."""
    z = rng.standard_normal((sims, looks))
    out = np.empty_like(z)
    out[:, 0] = z[:, 0]
    innovation = math.sqrt(1 - AR_RHO**2)
    for t in range(1, looks):
        out[:, t] = AR_RHO * out[:, t - 1] + innovation * z[:, t]
    return out


@dataclass(frozen=True)
class Scenario:
    name: str
    op: str
    excess_sd: float  # true (mean - threshold) on the breach side, in noise SDs; <= 0 is the null
    noise: Noise
    min_samples: int = FIRST_LOOK  # the t-mixture's; the other methods always start at FIRST_LOOK

    @property
    def threshold(self) -> float:
        return 1.0 if self.op == ">" else 0.6

    @property
    def noise_sd(self) -> float:
        return 1.0 if self.op == ">" else 0.05

    def paths(self, rng: np.random.Generator, sims: int, looks: int) -> FloatArray:
        # the noise is added as drawn (not mirrored for "<"): a right-skewed metric stays right-skewed
        side = 1.0 if self.op == ">" else -1.0
        mean = self.threshold + side * self.excess_sd * self.noise_sd
        return mean + self.noise_sd * self.noise(rng, sims, looks)


SCENARIOS = (
    Scenario("A/A: mean 1 SD on the OK side", ">", -1.0, normal_noise),
    Scenario("boundary, normal noise", ">", 0.0, normal_noise),
    Scenario("boundary, acceptance rate, normal noise", "<", 0.0, normal_noise),
    Scenario("boundary, lognormal 1.0, tail on the breach side", ">", 0.0, lognormal_noise(1.0)),
    Scenario("boundary, lognormal 0.5, tail on the OK side", "<", 0.0, lognormal_noise(0.5)),
    Scenario("boundary, lognormal 1.0, tail on the OK side", "<", 0.0, lognormal_noise(1.0)),
    Scenario("boundary, lognormal 1.0, tail on the OK side", "<", 0.0, lognormal_noise(1.0), min_samples=30),
    Scenario("boundary, candidate - control, lognormal 1.0 each", ">", 0.0, lognormal_difference_noise(1.0)),
    Scenario(f"boundary, AR(1) noise rho={AR_RHO}", ">", 0.0, ar1_noise),
    Scenario(f"boundary, AR(1) noise rho={AR_RHO}", ">", 0.0, ar1_noise, min_samples=30),
    Scenario("regression 0.5 SD", ">", 0.5, normal_noise),
    Scenario("regression 1 SD", ">", 1.0, normal_noise),
    Scenario("regression 2 SD", ">", 2.0, normal_noise),
    Scenario("acceptance rate falls 1 SD", "<", 1.0, normal_noise),
)


def _running_moments(excess: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per rollout and look: the number of looks n, the running sum and the running sample SD
    (NaN at the first look)."""
    n = np.arange(1, excess.shape[1] + 1, dtype=np.float64)
    s1 = np.cumsum(excess, axis=1)
    s2 = np.cumsum(excess * excess, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        sd = np.sqrt(np.maximum(s2 - s1 * s1 / n, 0.0) / (n - 1))
    return n, s1, sd


def plugin_breach(excess: FloatArray, *, alpha: float) -> npt.NDArray[np.bool_]:
    """Whether the one-sided normal mixture with the sample SD plugged in ever reaches 1/alpha."""
    n, s1, sd = _running_moments(excess)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = s1 / sd
    a = n + 1 / EFFECT_SCALE**2
    log_lr = (
        math.log(2) - 0.5 * np.log1p(n * EFFECT_SCALE**2) + b * b / (2 * a) + special.log_ndtr(b / np.sqrt(a))
    )
    hit = np.nan_to_num(log_lr, nan=-np.inf) >= math.log(1 / alpha)
    hit[:, : FIRST_LOOK - 1] = False
    return np.asarray(hit.any(axis=1))


def naive_breach(excess: FloatArray, *, alpha: float) -> npt.NDArray[np.bool_]:
    """Whether a one-sided level-alpha t-test repeated at every look ever rejects."""
    n, s1, sd = _running_moments(excess)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = s1 / n / (sd / np.sqrt(n))
        critical = stats.t.ppf(1 - alpha, np.maximum(n - 1, 1))
    hit = np.nan_to_num(t, nan=-np.inf) > critical
    hit[:, : FIRST_LOOK - 1] = False
    return np.asarray(hit.any(axis=1))


def wilson(hits: int, total: int) -> tuple[float, float]:
    """95% Wilson interval of a binomial rate."""
    z = 1.959963984540054
    p = hits / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Row:
    scenario: Scenario
    sims: int
    chosen: int  # rollouts the t-mixture breached
    early: int  # of those, breached by look EARLY
    median_look: float | None  # its median first-breach look among those
    plugin: int
    naive: int


def simulate(scenario: Scenario, *, sims: int, looks: int, alpha: float, rng: np.random.Generator) -> Row:
    """Run the three methods on ``sims`` simulated rollouts of ``looks`` looks."""
    firsts: list[npt.NDArray[np.int64]] = []
    plugin = naive = 0
    for start in range(0, sims, CHUNK):
        x = scenario.paths(rng, min(CHUNK, sims - start), looks)
        firsts.append(
            first_breach(
                x, op=scenario.op, threshold=scenario.threshold, alpha=alpha, min_samples=scenario.min_samples
            )
        )
        excess = x - scenario.threshold if scenario.op == ">" else scenario.threshold - x
        plugin += int(plugin_breach(excess, alpha=alpha).sum())
        naive += int(naive_breach(excess, alpha=alpha).sum())
    first = np.concatenate(firsts)
    detected = first[first > 0]
    median = float(np.median(detected)) if detected.size else None
    early = int((detected <= EARLY).sum())
    return Row(scenario, sims, int(detected.size), early, median, plugin, naive)


def _rate(hits: int, total: int) -> str:
    lo, hi = wilson(hits, total)
    return f"{hits / total:.3f} [{lo:.3f}, {hi:.3f}]"


def markdown(rows: list[Row]) -> str:
    """The table docs/statistics.md shows."""
    lines = [
        "| scenario | op | (mean - threshold) / SD | min_samples | t-mixture: breach rate [95% CI] "
        f"| by look {EARLY} | median look of breach | plug-in mixture | naive t every look |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        truth = f"{r.scenario.excess_sd:+g}" if r.scenario.excess_sd else "0"
        median = "-" if r.median_look is None else f"{r.median_look:g}"
        lines.append(
            f"| {r.scenario.name} | {r.scenario.op} | {truth} | {r.scenario.min_samples} "
            f"| {_rate(r.chosen, r.sims)} | {r.early / r.sims:.3f} | {median} "
            f"| {_rate(r.plugin, r.sims)} | {_rate(r.naive, r.sims)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sims", type=int, default=2000, help="rollouts per scenario")
    parser.add_argument("--looks", type=int, default=200, help="looks per rollout")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    if args.sims < 1 or args.looks < FIRST_LOOK:
        parser.error(f"--sims must be >= 1 and --looks >= {FIRST_LOOK}")
    rng = np.random.default_rng(args.seed)
    started, cpu = time.perf_counter(), time.process_time()
    rows = [simulate(s, sims=args.sims, looks=args.looks, alpha=args.alpha, rng=rng) for s in SCENARIOS]
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(
        f"alpha {args.alpha}, {args.sims} rollouts x {args.looks} looks per scenario, seed {args.seed}, "
        f"tau {EFFECT_SCALE} noise SDs; {wall:.1f} s wall, {cpu:.1f} s CPU\n"
    )
    print(markdown(rows))


if __name__ == "__main__":
    main()
