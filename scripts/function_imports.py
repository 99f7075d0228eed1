"""Project imports inside function bodies in console/ and workers/ (STYLE.md, practice 14).

    .venv/bin/python scripts/function_imports.py [--check] [--root DIR] [--allowed FILE]

Lists every import of a project module (``console.*``, ``workers.*``, or relative) made inside a
function or method, one a line as ``path:function -> module``, where ``function`` is qualified
(``Class.method``, ``outer.inner``) and ``module`` is absolute (a relative import resolved;
``from console.analysis import fit`` names ``console.analysis.fit`` when that is a module).
"(seam comment)" marks one whose line above is a ``# seam: <why>`` comment.

The allow-list (scripts/function_imports_allowed.txt) exempts lines written as
``path:function -> module  # reason``; blank lines and lines starting with ``#`` are skipped.
``--check`` exits 1 on an import not on it, on an allow-list line that matches no import any
more (stale), and on one that gives no reason. Heavy third-party imports inside functions
(torch, transformers, vllm...) are counted in a section of their own, never failed on.
Migrations are not read. Uses ``ast`` only: nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGES = ("console", "workers")
SKIPPED_DIRS = {"migrations", "__pycache__"}
HEAVY = ("torch", "transformers", "vllm", "litellm", "reportlab", "plotly", "accelerate", "pypdfium2")
ALLOWED = Path(__file__).resolve().parent / "function_imports_allowed.txt"


@dataclass(frozen=True)
class FunctionImport:
    path: str  # relative to the root, with forward slashes
    line: int
    function: str
    module: str
    seam: bool  # the line above is a `# seam:` comment

    @property
    def key(self) -> str:
        """The line the allow-list holds for it (without the reason)."""
        return f"{self.path}:{self.function} -> {self.module}"


def source_files(root: Path) -> Iterator[Path]:
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if not SKIPPED_DIRS.intersection(path.relative_to(root).parts[:-1]):
                yield path


def _package(rel: str) -> list[str]:
    """The package a module path sits in, as parts (``console/a/b.py`` and ``console/a/__init__.py``: console, a)."""
    return rel[:-3].split("/")[:-1]


def _is_module(root: Path, dotted: str) -> bool:
    base = root.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_modules(node: ast.Import | ast.ImportFrom, *, rel: str, root: Path) -> list[str]:
    """The absolute names of the modules ``node`` imports."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = _package(rel)
        package = package[: len(package) - (node.level - 1)]
        base = ".".join([*package, *([base] if base else [])])
    named = [f"{base}.{alias.name}" for alias in node.names if _is_module(root, f"{base}.{alias.name}")]
    return named if len(named) == len(node.names) else [base, *named]


def _imports(
    node: ast.AST, scope: tuple[str, ...] = (), in_function: bool = False
) -> Iterator[tuple[str, ast.Import | ast.ImportFrom]]:
    """(qualified function, import node) for every import inside a function body; ``scope`` is
    the names of the enclosing classes and functions."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield from _imports(child, (*scope, child.name), True)
        elif isinstance(child, ast.ClassDef):
            yield from _imports(child, (*scope, child.name), in_function)
        elif isinstance(child, ast.Import | ast.ImportFrom):
            if in_function:
                yield ".".join(scope), child
        else:
            yield from _imports(child, scope, in_function)


def function_imports(root: Path) -> tuple[list[FunctionImport], Counter[str]]:
    """(project imports inside functions, sorted by path and line; heavy imports counted by module)."""
    found: dict[str, FunctionImport] = {}
    heavy: Counter[str] = Counter()
    for path in source_files(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines()
        for function, node in _imports(ast.parse(text, filename=str(path))):
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            for module in imported_modules(node, rel=rel, root=root):
                top = module.split(".")[0]
                if top in HEAVY:
                    heavy[top] += 1
                elif top in PACKAGES:
                    item = FunctionImport(rel, node.lineno, function, module, above.startswith("# seam:"))
                    found.setdefault(item.key, item)
    return sorted(found.values(), key=lambda i: (i.path, i.line, i.module)), heavy


def allow_list(path: Path) -> list[tuple[int, str, str]]:
    """(line number, ``path:function -> module``, reason) for each entry of the allow-list."""
    if not path.is_file():
        return []
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, reason = line.partition("#")
            entries.append((number, " ".join(key.split()), reason.strip()))
    return entries


def check(imports: list[FunctionImport], entries: list[tuple[int, str, str]]) -> list[str]:
    """What ``--check`` fails on: unlisted imports, stale allow-list lines, lines with no reason."""
    keys = {i.key for i in imports}
    listed = {key for _, key, _ in entries}
    problems = [f"not allowed: {i.key}" for i in imports if i.key not in listed]
    problems += [f"stale allow-list line {n}: {key}" for n, key, _ in entries if key not in keys]
    problems += [f"allow-list line {n} gives no reason: {key}" for n, key, reason in entries if not reason]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on unlisted or stale entries")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout (default: here)")
    parser.add_argument("--allowed", type=Path, default=ALLOWED, help="the allow-list file")
    args = parser.parse_args(argv)
    imports, heavy = function_imports(args.root)
    entries = allow_list(args.allowed)
    listed = {key for _, key, _ in entries}
    print(
        f"Project imports inside functions: {len(imports)} ({sum(i.key not in listed for i in imports)} not allowed)"
    )
    for item in imports:
        marks = [m for m, on in (("allowed", item.key in listed), ("seam comment", item.seam)) if on]
        print(f"  {item.key}" + (f"  ({', '.join(marks)})" if marks else ""))
    print(f"Heavy third-party imports inside functions (counted, not failed): {sum(heavy.values())}")
    for module, count in sorted(heavy.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {module}: {count}")
    problems = check(imports, entries)
    if args.check:
        for problem in problems:
            print(problem)
    return 1 if args.check and problems else 0


if __name__ == "__main__":
    sys.exit(main())
