"""Which arrival (seconds from the trace start) each record of an import gets: the file's own, a
process's (a prompt set has no timing of its own), borrowed ones, or its clock rebased to the first
record's; a later turn of a session is timed by its session instead."""

from __future__ import annotations

from collections.abc import Iterator

from console.traces.arrivals import ArrivalSpec, arrival_spec_parse, arrivals_generate
from console.traces.errors import ErrorLog
from console.traces.parsers import PROMPTS, Record

DEFAULT_PROMPT_ARRIVAL = "poisson:1"


class ArrivalAssigner:
    """Sets ``arrival_s`` on each record as it is read. Built once per import: the choice of
    arrivals is reported then (``errors``, ``warnings``), and ``label`` names it for the trace."""

    def __init__(
        self,
        *,
        kind: str,
        spec: ArrivalSpec | None,
        borrowed: list[float] | None,
        seed: int,
        needs_timestamp: bool,
        errors: ErrorLog,
        warnings: list[str],
    ):
        self.errors = errors
        self.needs_timestamp = needs_timestamp  # a request log: each record must carry its own time
        self.label = "trace"
        self._origin: float | None = None  # the first record's clock reading (s)
        self._ran_out = False
        self._source = self._arrival_source(kind, spec, borrowed, seed, warnings)

    def _arrival_source(
        self,
        kind: str,
        spec: ArrivalSpec | None,
        borrowed: list[float] | None,
        seed: int,
        warnings: list[str],
    ) -> Iterator[float] | None:
        """Arrivals that replace the file's own, or None to keep them."""
        if kind == PROMPTS and (spec is None or spec.kind == "trace"):
            if spec is not None:
                self.errors.add(None, "arrival", "this prompt set has no timing: give an arrival process")
            spec = arrival_spec_parse(DEFAULT_PROMPT_ARRIVAL)
            warnings.append(
                f"The file has no timing: arrivals come from {spec} (seed {seed}), "
                "the default; choose the process explicitly for a real evaluation."
            )
        if spec is None or spec.kind == "trace":
            return None
        if kind != PROMPTS:
            warnings.append(f"The file's own arrival times were replaced by {spec}.")
        self.label = str(spec)
        if spec.kind == "borrow":
            return iter(borrowed or [])
        return arrivals_generate(spec, seed=seed)

    def assign(self, record: Record, built: int) -> tuple[bool, float | None]:
        """Give the record its arrival (s): from the arrival source, its clock (an offset from the
        first record's, returned to be set once the record is checked: it may be negative before the
        shift), or its own ``arrival_s``; a later turn's is left to its session's start. False: skip
        the record (reported). ``built``: the requests built so far (the message when arrivals run out)."""
        data = record.data
        arrivals = self._source
        if data.get("turn") and (arrivals is not None or record.clock_s is not None):
            data.pop("arrival_s", None)  # nominal: the session's start, set once the turn is checked
        elif arrivals is not None:
            value = next(arrivals, None)
            if value is None:
                if not self._ran_out:
                    self.errors.add(
                        record.line, "arrival", f"the borrowed arrivals ran out after {built} requests"
                    )
                    self._ran_out = True
                return False, None
            data["arrival_s"] = value
        elif record.clock_s is not None:
            if self._origin is None:
                self._origin = record.clock_s
            data["arrival_s"] = 0.0  # checked as it is; the clock offset is set after
            return True, record.clock_s - self._origin
        elif self.needs_timestamp and "arrival_s" not in data:
            self.errors.add(
                record.line, "timestamp", "is missing: give the request a timestamp, or an arrival process"
            )
            return False, None
        return True, None
