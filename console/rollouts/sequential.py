"""The always-valid one-sided test a rollback trigger runs at every look of a guarded rollout.

The question
------------
A trigger sees one observation per look (per non-overlapping window): the candidate minus the
control (``compare="control"``, e.g. p95 TPOT difference in seconds) or the candidate's own value
(``compare="absolute"``, e.g. acceptance rate, a fraction). A **breach** is evidence that the mean
of those observations lies beyond ``threshold`` on the op's side; the null is the mean on the OK
side, the threshold itself included. So ``>`` and ``>=`` run the same test (H0: mean <= threshold)
and so do ``<`` and ``<=`` (H0: mean >= threshold). Looks come one at a time, without end, so a
fixed-level test repeated at every look would false-alarm with a probability that grows towards 1
(0.36 for a 5% t-test over 200 looks, 0.38 over 500): the test must hold its level over any number of looks.

The method: a sequential t-test (scale-invariant normal mixture)
----------------------------------------------------------------
Write ``y_i`` for the observation's excess over the threshold on the breach side (``x_i -
threshold`` for ``>``/``>=``, ``threshold - x_i`` for ``<``/``<=``) and ``delta = E[y] / sd`` for
the standardized excess. The evidence after n looks is the Bayes factor of ``delta > 0`` against
``delta = 0`` with the noise SD integrated out under the scale-invariant (right Haar) prior
``d sigma / sigma`` and ``delta`` drawn from a half-normal prior of scale ``tau`` (Robbins'
mixture, as in the mSPRT of Johari, Pekelis and Walsh, "Always valid inference", 2017, but on the
t statistic's scale instead of a plugged-in variance; Lai 1976; Perez-Ortiz, Lardy, de Heide and
Grunwald 2022). In closed form, with ``S = sum(y) / sqrt(sum(y**2))``, ``a = n + 1 / tau**2``,
``c = 1 - S**2 / a`` and ``k = S / sqrt(a c)``:

    BF_n = 2 (1 + n tau**2) ** -0.5  c ** (-n / 2)  T_n(k sqrt(n))

(``T_n``: Student's t CDF with n degrees of freedom). ``BF_n`` depends on the data only through
the scale-free direction of ``y``, and is that direction's likelihood ratio, so it is a
nonnegative martingale with mean 1 when the mean is exactly at the threshold, **whatever the
noise SD**. Ville's inequality then bounds the chance that it ever reaches ``1 / alpha``:
``P(sup_n BF_n >= 1 / alpha) <= alpha``. The always-valid p-value is ``min(1, 1 / max BF_m)``
over the looks ``needed <= m <= n``, a running minimum, and a breach is ``p <= alpha``.

Why not the mSPRT with a plugged-in variance: replacing the unknown SD by the sample SD makes the
mixture no longer a martingale, and at small n the sample SD is often far too small, so the
statistic overshoots; on normal noise at the boundary it false-alarmed in about 11% of rollouts
against 3.3-3.6% for this test (alpha 0.05, 200-500 looks; ``python -m
console.rollouts.sequential_calibration``, docs/statistics.md).

The mixture scale ``tau`` (``EFFECT_SCALE``) is a documented default **in noise SDs, set from the
data's own scale**: the prior on the excess is half-normal with SD ``tau`` times the noise SD, so
the test needs no unit and no guess of the noise level. 1.0 puts the most power on regressions of
about 0.5-2 SDs; the level holds for any ``tau``, only the detection delay moves.

Looks needed: because the SD is unknown, ``BF_n`` can never exceed ``2 (1 + n tau**2) **
((n - 1) / 2)`` (all n observations equal), so a breach is impossible before that reaches
``1 / alpha``: 4 looks at alpha 0.05, 6 at alpha 0.01 (``tau = 1``). ``needed`` is the larger of
that and the trigger's ``min_samples``, and evidence counts only from look ``needed`` on: Ville's
bound covers any subset of looks, and a run of early looks that merely share a sign (skewed
noise: most of a right-skewed metric's windows sit below its mean) then cannot carry a breach.
So ``min_samples`` is the trigger's lever against skewed noise (30 cuts the worst simulated case
by more than half), paid for in detection delay.

Assumptions: the looks' observations are independent (non-overlapping windows) with a common
mean; the guarantee is exact for normal noise at the threshold (and, by simulation, conservative
inside the null). Skewed noise and autocorrelation between windows are measured, not assumed
away, in the calibration (docs/statistics.md): a long tail on the OK side (a right-skewed metric
under ``<``) and positively autocorrelated windows (rho 0.3) both push the false-alarm rate well
above alpha; a tail on the breach side makes the test conservative, and a candidate-minus-control
difference of two alike pools is symmetric.

Pure numpy/scipy; no Django.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy import special

OPS = (">", ">=", "<", "<=")
EFFECT_SCALE = 1.0  # tau: prior SD of the standardized excess (mean - threshold) / sd, in noise SDs

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class SequentialResult:
    """A trigger's test after its latest look; ``mean`` and ``sd`` are in the observations' unit."""

    n: int  # finite observations used (looks with data)
    mean: float | None  # their mean; None when n == 0
    sd: float | None  # their sample SD (n - 1 denominator); None when n < 2
    p_value: float  # always-valid p-value (running minimum over looks so far); 1.0 when n < needed
    state: str  # "not_enough" (n < needed), "ok", "breach"
    needed: int  # looks needed before a breach may be declared


def check_arguments(*, op: str, threshold: float, alpha: float, min_samples: int) -> None:
    """Raise ValueError naming the bad argument; the same checks a trigger form should run."""
    if op not in OPS:
        raise ValueError(f"op ({op!r}) must be one of {', '.join(OPS)}")
    if not _is_real(threshold) or not math.isfinite(threshold):
        raise ValueError(f"threshold ({threshold!r}) must be a finite number")
    if not _is_real(alpha) or not 1e-12 <= alpha <= 0.5:  # 1/alpha finite, looks_needed ends
        raise ValueError(f"alpha ({alpha!r}) must be in [1e-12, 0.5]")
    if isinstance(min_samples, bool) or not isinstance(min_samples, int) or min_samples < 1:
        raise ValueError(f"min_samples ({min_samples!r}) must be an integer >= 1")


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def looks_needed(*, alpha: float, min_samples: int, effect_scale: float = EFFECT_SCALE) -> int:
    """Looks before a breach may be declared: ``min_samples`` or the fewest at which ``BF_n`` can
    reach ``1 / alpha`` at all (``2 (1 + n tau**2) ** ((n - 1) / 2) >= 1 / alpha``), the larger."""
    check_arguments(op=">", threshold=0.0, alpha=alpha, min_samples=min_samples)
    target = math.log(1 / alpha) - math.log(2)
    n = 1
    while (n - 1) / 2 * math.log1p(n * effect_scale**2) < target:
        n += 1
    return max(min_samples, n)


def _power_of_two_above(magnitude: FloatArray) -> FloatArray:
    # dividing by a power of two is exact, so a prefix's excess differs from the same looks'
    # excess in a longer list only by an exact factor, and its evidence is bit-for-bit the same
    _, exponent = np.frexp(magnitude)
    return np.where(magnitude > 0, np.ldexp(1.0, exponent), 1.0)


def breach_excess(values: npt.ArrayLike, *, op: str, threshold: float) -> FloatArray:
    """The excess over ``threshold`` on the breach side, along the last axis, rescaled per row by a
    power of two to a largest magnitude in [0.5, 1) (the test is scale-free; rescaling keeps the
    squares finite for any finite input). Unitless."""
    x = np.asarray(values, dtype=np.float64)
    scale = _power_of_two_above(
        np.maximum(np.max(np.abs(x), axis=-1, keepdims=True, initial=0.0), abs(threshold))
    )
    y = x / scale - threshold / scale
    if op in ("<", "<="):
        y = -y
    return np.asarray(y / _power_of_two_above(np.max(np.abs(y), axis=-1, keepdims=True, initial=0.0)))


def log_evidence(excess: FloatArray, *, effect_scale: float = EFFECT_SCALE) -> FloatArray:
    """``log BF_n`` after every look n = 1, 2, ... along the last axis of ``excess`` (finite values,
    e.g. from ``breach_excess``); 0 (no evidence) while every excess so far is exactly 0."""
    n = np.arange(1, excess.shape[-1] + 1, dtype=np.float64)
    s1 = np.cumsum(excess, axis=-1)
    s2 = np.cumsum(excess * excess, axis=-1)
    seen = s2 > 0
    s_sq = np.minimum(np.where(seen, s1 * s1 / np.where(seen, s2, 1.0), 0.0), n)  # Cauchy-Schwarz
    a = n + 1 / effect_scale**2
    c = (a - s_sq) / a
    k = np.sign(s1) * np.sqrt(s_sq / (a * c))
    with np.errstate(divide="ignore"):
        log_t = np.log(special.stdtr(n, k * np.sqrt(n)))
    log_bf = math.log(2) - 0.5 * np.log1p(n * effect_scale**2) - n / 2 * np.log(c) + log_t
    return np.asarray(np.where(seen, log_bf, 0.0), dtype=np.float64)


def first_breach(
    observations: npt.ArrayLike, *, op: str, threshold: float, alpha: float = 0.05, min_samples: int = 3
) -> npt.NDArray[np.int64]:
    """Vectorised over rows (one rollout per row, one finite observation per look, in the
    observations' unit): the look (1-based) at which ``sequential_evaluate`` first says "breach",
    0 when it never does. For simulations; the evaluator calls ``sequential_evaluate``."""
    check_arguments(op=op, threshold=threshold, alpha=alpha, min_samples=min_samples)
    log_bf = log_evidence(breach_excess(observations, op=op, threshold=threshold))
    needed = looks_needed(alpha=alpha, min_samples=min_samples)
    log_bf[..., : needed - 1] = -np.inf  # evidence counts from look `needed` on (see the module doc)
    hit = np.maximum.accumulate(log_bf, axis=-1) >= math.log(1 / alpha)
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1) + 1, 0).astype(np.int64)


def sequential_evaluate(
    observations: Sequence[float], *, op: str, threshold: float, alpha: float = 0.05, min_samples: int = 3
) -> SequentialResult:
    """Test a trigger on every look so far (oldest first, one observation per look, in the
    trigger's unit: seconds for a latency difference, a fraction for an acceptance rate).

    Non-finite observations (a look with no data) are ignored and not counted. ``threshold`` is in
    the observations' unit; ``alpha`` bounds the false-alarm probability over any number of looks;
    a breach needs at least ``needed = looks_needed(alpha, min_samples)`` finite observations.
    Raises ValueError on an op outside ``>``, ``>=``, ``<``, ``<=``, alpha outside (0, 0.5],
    ``min_samples < 1`` or a non-finite threshold.
    """
    check_arguments(op=op, threshold=threshold, alpha=alpha, min_samples=min_samples)
    x = np.asarray(observations, dtype=np.float64).reshape(-1)
    x = x[np.isfinite(x)]
    n = int(x.size)
    needed = looks_needed(alpha=alpha, min_samples=min_samples)
    mean = float(np.mean(x)) if n else None
    sd = float(np.std(x, ddof=1)) if n >= 2 else None
    if n < needed:
        return SequentialResult(n=n, mean=mean, sd=sd, p_value=1.0, state="not_enough", needed=needed)
    best = float(np.max(log_evidence(breach_excess(x, op=op, threshold=threshold))[needed - 1 :]))
    p_value = min(1.0, math.exp(-best)) if best > 0 else 1.0
    state = "breach" if best >= math.log(1 / alpha) else "ok"
    return SequentialResult(n=n, mean=mean, sd=sd, p_value=p_value, state=state, needed=needed)
