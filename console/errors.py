"""Error types shared by every app, mapped once by the web layers.

``Conflict``: the request was valid, but the object changed under it (someone else acted
first: a decision already signed, a run already claimed). Pages show its message; the JSON
API answers 409 with ``{"error": message}``.
"""

from __future__ import annotations


class Conflict(Exception):
    """The object's current state forbids the request; the message says who or what won."""
