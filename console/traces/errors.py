"""Import errors, collected per file, line and field, and raised together at the end of a parse."""

from __future__ import annotations

from dataclasses import asdict, dataclass

DEFAULT_ERROR_CAP = 100


@dataclass(frozen=True)
class TraceError:
    """One problem in an input file. ``line`` is the 1-based line (CSV: physical line, header = 1)."""

    line: int | None
    field: str | None
    message: str
    file: str = ""

    def __str__(self) -> str:
        where = self.file or "<input>"
        if self.line is not None:
            where += f":{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def as_dict(self) -> dict:
        return asdict(self)


class TraceImportError(Exception):
    """Bad input: nothing was stored. ``errors`` lists the first ``cap`` problems, ``more`` counts the rest."""

    def __init__(self, errors: list[TraceError], *, more: int = 0):
        self.errors = list(errors)
        self.more = more
        first = str(self.errors[0]) if self.errors else "invalid trace"
        extra = len(self.errors) - 1 + more
        super().__init__(first + (f" (and {extra} more errors)" if extra else ""))

    @property
    def total(self) -> int:
        return len(self.errors) + self.more

    def lines(self) -> list[str]:
        out = [str(e) for e in self.errors]
        if self.more:
            out.append(f"... and {self.more} more errors not shown")
        return out

    def as_dict(self) -> dict:
        return {"errors": [e.as_dict() for e in self.errors], "more": self.more, "total": self.total}


class ErrorLog:
    """Collects errors up to a cap, then only counts them."""

    def __init__(self, *, file: str = "", cap: int = DEFAULT_ERROR_CAP):
        self.file = file
        self.cap = cap
        self.errors: list[TraceError] = []
        self.more = 0

    def add(self, line: int | None, field: str | None, message: str) -> None:
        if len(self.errors) < self.cap:
            self.errors.append(TraceError(line, field, message, self.file))
        else:
            self.more += 1

    def __bool__(self) -> bool:
        return bool(self.errors) or self.more > 0

    def raise_if_any(self) -> None:
        if self:
            raise TraceImportError(self.errors, more=self.more)

    @classmethod
    def fail(cls, message: str, *, file: str = "", line: int | None = None, field: str | None = None):
        """Raise a single-error TraceImportError at once (for errors that stop reading the file)."""
        raise TraceImportError([TraceError(line, field, message, file)])
