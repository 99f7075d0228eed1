"""The JSON Schema of one native trace line; compiler.py compiles it into the check validation.py runs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

REQUEST_SCHEMA_PATH = Path(__file__).with_name("request.schema.json")


@cache
def request_schema() -> dict:
    return json.loads(REQUEST_SCHEMA_PATH.read_text(encoding="utf-8"))
