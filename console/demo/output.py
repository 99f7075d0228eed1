"""Where the demo writes: the command's stdout, styled."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.core.management.base import OutputWrapper
from django.core.management.color import Style


@dataclass(frozen=True)
class Say:
    """Writes a line to the command's stdout. After SIGHUP the terminal is gone: what is left to
    do (stopping the worker, cancelling runs) must not fail on a write, so a failed write is
    dropped."""

    stdout: OutputWrapper
    style: Style

    def __call__(self, text: str, style: Callable[[str], str] | None = None) -> None:
        try:
            self.stdout.write(style(text) if style else text)
        except OSError:
            pass

    def heading(self, text: str) -> None:
        self(text, self.style.MIGRATE_HEADING)

    def warning(self, text: str) -> None:
        self(text, self.style.WARNING)
