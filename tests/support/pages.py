"""Reading a rendered page in tests: one section of it by its id."""

from __future__ import annotations


def page_section(html: str, section_id: str) -> str:
    """The HTML from the element with ``id=section_id`` to the first ``</section>`` after it."""
    part = html[html.index(f'id="{section_id}"') :]
    return part[: part.index("</section>")]
