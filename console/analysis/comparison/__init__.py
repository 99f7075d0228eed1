"""The comparison: a typed contract (:mod:`.schema`) computed in stages (:mod:`.compute`)."""

from console.analysis.comparison.compute import comparison_compute
from console.analysis.comparison.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "comparison_compute"]
