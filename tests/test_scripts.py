"""The structure scripts (long units, imports inside functions) and the recordings' comparison:
fast, no database, each on files planted in a temporary directory."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


long_units = _script("long_units")
function_imports = _script("function_imports")
record_outputs = _script("record_outputs")


def _plant(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _function(name: str, body_lines: int, docstring: str = "") -> str:
    doc = f'    """{docstring}"""\n' if docstring else ""
    return f"def {name}():\n{doc}" + "    x = 1\n" * body_lines + "    return x\n"


# -- long_units ------------------------------------------------------------------------------


def test_it_lists_a_long_function_and_a_long_module_without_a_reason(tmp_path, capsys):
    _plant(
        tmp_path,
        "console/app/long.py",
        _function("short", 10) + "\n\n" + _function("planted", 85) + "\n" * 320,
    )
    assert long_units.main(["--root", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    assert "console/app/long.py:15 planted 87 lines\n" in out
    assert "short" not in out
    assert "console/app/long.py:1 console.app.long 421 lines\n" in out


def test_it_honours_a_stated_reason_in_the_docstring(tmp_path, capsys):
    module_doc = '"""A long module.\n\nLong because: one table per format, read together.\n"""\n'
    reason = "Planted.\n\n    Long because: the steps share one transaction.\n    "
    _plant(tmp_path, "workers/long.py", module_doc + _function("planted", 85, reason) + "\n" * 320)
    assert long_units.main(["--root", str(tmp_path), "--check"]) == 0
    out = capsys.readouterr().out
    assert "workers/long.py:5 planted 91 lines (reason stated)" in out
    assert "workers/long.py:1 workers.long 415 lines (reason stated)" in out


def test_it_names_methods_by_class_and_skips_migrations_and_tests(tmp_path):
    method = _function("handle", 90).replace("\n", "\n    ").replace("def handle():", "def handle(self):")
    _plant(tmp_path, "console/app/views.py", "class Page:\n    " + method)
    _plant(tmp_path, "console/app/migrations/0001_initial.py", _function("migrate", 200))
    _plant(tmp_path, "console/app/tests/test_x.py", _function("test_it", 200))
    functions, modules = long_units.long_units(tmp_path)
    assert [(u.path, u.name) for u in functions] == [("console/app/views.py", "Page.handle")]
    assert modules == []


# -- function_imports --------------------------------------------------------------------------

PLANTED = """from console.top import fine


def view():
    from console.analysis.selectors import results_frames
    import torch

    return results_frames, torch


class Engine:
    def start(self):
        # seam: the catalog is read only when an engine starts
        from .servers import credential_values

        return credential_values
"""


def _imports_root(tmp_path: Path) -> Path:
    _plant(tmp_path, "workers/engines/hf.py", PLANTED)
    _plant(tmp_path, "workers/engines/servers.py", "")
    _plant(
        tmp_path,
        "console/app/migrations/0002_data.py",
        "def forwards():\n    from console.app import models\n",
    )
    return tmp_path


def test_it_lists_project_imports_inside_functions_and_counts_heavy_ones(tmp_path, capsys):
    root = _imports_root(tmp_path)
    allowed = _plant(tmp_path, "allowed.txt", "")
    assert function_imports.main(["--root", str(root), "--allowed", str(allowed), "--check"]) == 1
    out = capsys.readouterr().out
    assert "workers/engines/hf.py:view -> console.analysis.selectors\n" in out
    assert "workers/engines/hf.py:Engine.start -> workers.engines.servers  (seam comment)\n" in out
    assert "console.top" not in out and "migrations" not in out
    assert "  torch: 1\n" in out
    assert "not allowed: workers/engines/hf.py:view -> console.analysis.selectors" in out


def test_it_passes_when_the_allow_list_names_each_import_with_a_reason(tmp_path, capsys):
    root = _imports_root(tmp_path)
    allowed = _plant(
        tmp_path,
        "allowed.txt",
        "# path:function -> module  # reason\n\n"
        "workers/engines/hf.py:view -> console.analysis.selectors  # planted seam\n"
        "workers/engines/hf.py:Engine.start -> workers.engines.servers  # credentials read late\n",
    )
    assert function_imports.main(["--root", str(root), "--allowed", str(allowed), "--check"]) == 0
    assert "(0 not allowed)" in capsys.readouterr().out


def test_it_fails_on_a_stale_allow_list_line_and_on_one_without_a_reason(tmp_path, capsys):
    root = _imports_root(tmp_path)
    allowed = _plant(
        tmp_path,
        "allowed.txt",
        "workers/engines/hf.py:view -> console.analysis.selectors\n"
        "workers/engines/hf.py:Engine.start -> workers.engines.servers  # credentials read late\n"
        "workers/engines/hf.py:gone -> console.analysis.metrics  # was moved to the top\n",
    )
    assert function_imports.main(["--root", str(root), "--allowed", str(allowed), "--check"]) == 1
    out = capsys.readouterr().out
    assert "stale allow-list line 3: workers/engines/hf.py:gone -> console.analysis.metrics" in out
    assert (
        "allow-list line 1 gives no reason: workers/engines/hf.py:view -> console.analysis.selectors" in out
    )
    assert "not allowed" not in out.split("\n", 1)[1]


def test_the_repository_has_no_project_import_inside_a_function_off_its_allow_list(capsys):
    # the real tree: every import inside a function is listed with a reason, and no line is stale
    assert function_imports.main(["--check", "--root", str(SCRIPTS.parent)]) == 0, capsys.readouterr().out


# -- record_outputs --compare --------------------------------------------------------------------


def _recording(path: Path, value: float, text: str = "same") -> Path:
    path.write_text(json.dumps({"comparison": {"headline": [{"delta": value, "n": 3}]}, "markdown": [text]}))
    return path


@pytest.mark.parametrize(("offset", "rc"), [(1e-12, 0), (1e-6, 1)])
def test_compare_accepts_float_noise_and_reports_a_real_difference(tmp_path, capsys, offset, rc):
    a = _recording(tmp_path / "a.json", 0.25)
    b = _recording(tmp_path / "b.json", 0.25 + offset)
    assert record_outputs.main(["--compare", str(a), str(b)]) == rc
    out = capsys.readouterr().out
    assert ("$.comparison.headline[0].delta: 0.25 != " in out) is bool(rc)


def test_compare_takes_nan_as_equal_and_infinity_only_as_itself():
    assert list(record_outputs.tree_diff([float("nan"), float("inf")], [float("nan"), float("inf")])) == []
    assert list(record_outputs.tree_diff([float("inf")], [1.0])) == ["$[0]: inf != 1.0"]
    assert list(record_outputs.tree_diff({"n": 1}, {"n": True})) == ["$.n: 1 != True"]


def test_compare_walks_directories_and_reports_text_and_shape_by_path(tmp_path, capsys):
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    _recording(tmp_path / "a" / "bench.json", 1.0, "PASS")
    _recording(tmp_path / "b" / "bench.json", 1.0, "FAIL")
    _recording(tmp_path / "a" / "browser.json", 1.0)
    assert record_outputs.main(["--compare", str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "browser.json: only in A" in out
    assert "bench:$.markdown[0]: 'PASS' != 'FAIL'" in out


def test_normalise_replaces_times_and_the_hashes_of_timed_text_everywhere():
    digest = "ab" * 32
    recorded = {
        "archive": {
            "bundle_sha256": digest,
            "previous_sha256": "0" * 64,
            "at": "2026-12-03T06:18:04.123+00:00",
        },
        "config_hash": "cd" * 32,
        "lines": [f"bundle sha256 {digest}", "signed 2026-12-03 06:18 UTC by alex"],
    }
    assert record_outputs.normalise(recorded) == {
        "archive": {"bundle_sha256": "<sha256:timed>", "previous_sha256": "0" * 64, "at": "<time>"},
        "config_hash": "cd" * 32,
        "lines": ["bundle sha256 <sha256:timed>", "signed <time> by alex"],
    }


def test_a_large_results_csv_is_kept_as_column_fingerprints(monkeypatch):
    monkeypatch.setattr(record_outputs, "FULL_CSV_ROWS", 2)
    text = 'run_id,chunk_times,arm\n1,"[0.5, 1.5]",baseline\n2,"[1.0]",k=2\n3,[],k=2\n'
    record = record_outputs.csv_record(text)
    assert record["n_rows"] == 3 and record["first_rows"][0] == [1, [0.5, 1.5], "baseline"]
    assert record["columns"]["chunk_times"] == {
        "numbers": 3,
        "sum": 3.0,
        "min": 0.5,
        "max": 1.5,
        "texts": [],
        "n_texts": 0,
    }
    assert record["columns"]["arm"]["texts"] == ["baseline", "k=2"]
