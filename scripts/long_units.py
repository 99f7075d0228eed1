"""Functions over 80 lines and modules over 400 in console/ and workers/ (STYLE.md, practice 16).

    .venv/bin/python scripts/long_units.py [--check] [--root DIR]

Prints two lists, longest first, one unit a line as ``path:line name N lines``; a unit whose
docstring (the module's, for a file) has a line starting ``Long because:`` is marked
"(reason stated)". ``--check`` exits 1 when any listed unit states no reason. Migrations and
tests are not counted. A function's lines run from its ``def`` to its last line (decorators
excluded, nested functions included); a module's are its physical lines. Reads the source with
``ast`` only: nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

FUNCTION_LIMIT = 80  # lines
MODULE_LIMIT = 400  # lines
PACKAGES = ("console", "workers")
SKIPPED_DIRS = {"migrations", "tests", "__pycache__"}
REASON = "Long because:"


@dataclass(frozen=True)
class Unit:
    path: str  # relative to the root, with forward slashes
    line: int
    name: str
    lines: int
    reason: bool

    def __str__(self) -> str:
        mark = " (reason stated)" if self.reason else ""
        return f"{self.path}:{self.line} {self.name} {self.lines} lines{mark}"


def has_reason(docstring: str | None) -> bool:
    """Whether a docstring has a line starting ``Long because:`` (leading spaces ignored)."""
    return any(line.strip().startswith(REASON) for line in (docstring or "").splitlines())


def source_files(root: Path) -> Iterator[Path]:
    """The Python files under root/console and root/workers, migrations and tests left out."""
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if not SKIPPED_DIRS.intersection(path.relative_to(root).parts[:-1]):
                yield path


def _functions(
    node: ast.AST, prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from _functions(child, f"{prefix}{child.name}.")
        elif isinstance(child, ast.ClassDef):
            yield from _functions(child, f"{prefix}{child.name}.")
        else:
            yield from _functions(child, prefix)


def file_units(path: Path, root: Path) -> tuple[list[Unit], Unit | None]:
    """The long functions of one file, and the file itself when it is long (else None)."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    rel = path.relative_to(root).as_posix()
    functions = []
    for name, node in _functions(tree):
        lines = (node.end_lineno or node.lineno) - node.lineno + 1
        if lines > FUNCTION_LIMIT:
            functions.append(Unit(rel, node.lineno, name, lines, has_reason(ast.get_docstring(node))))
    n_lines = len(text.splitlines())
    module = Unit(rel, 1, rel[:-3].replace("/", "."), n_lines, has_reason(ast.get_docstring(tree)))
    return functions, module if n_lines > MODULE_LIMIT else None


def long_units(root: Path) -> tuple[list[Unit], list[Unit]]:
    """(functions over ``FUNCTION_LIMIT`` lines, modules over ``MODULE_LIMIT``), longest first."""
    functions: list[Unit] = []
    modules: list[Unit] = []
    for path in source_files(root):
        found, module = file_units(path, root)
        functions += found
        modules += [module] if module else []
    order = lambda u: (-u.lines, u.path, u.line)  # noqa: E731
    return sorted(functions, key=order), sorted(modules, key=order)


def _section(title: str, units: list[Unit]) -> list[str]:
    missing = sum(not u.reason for u in units)
    return [f"{title}: {len(units)} ({missing} without a stated reason)", *(f"  {u}" for u in units)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a listed unit states no reason")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    args = parser.parse_args(argv)
    functions, modules = long_units(args.root)
    print("\n".join(_section(f"Functions over {FUNCTION_LIMIT} lines", functions)))
    print("\n".join(_section(f"Modules over {MODULE_LIMIT} lines", modules)))
    unexplained = [u for u in functions + modules if not u.reason]
    return 1 if args.check and unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
