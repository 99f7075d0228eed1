"""Pagination and sorting for the console's list pages, one way for every list.

A list page reads ``?page=`` and ``?sort=`` (``name`` ascending, ``-name`` descending) from the
query string. Sort keys are a whitelist per list: an unknown key falls back to the list's default
ordering and a bad or out-of-range page number to the first or last page, so hostile query
strings never reach the ORM and never answer 500. Two lists on one page take a ``prefix``
(``?runs_page=``, ``?runs_sort=``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet
from django.http import HttpRequest, QueryDict

PER_PAGE = 25


@dataclass(frozen=True)
class Header:
    """One sortable column header: the link that sorts by it and how it is sorted now."""

    url: str
    state: str  # "ascending", "descending" or "none" (the aria-sort values)

    @property
    def arrow(self) -> str:
        return {"ascending": "▲", "descending": "▼"}.get(self.state, "")


@dataclass
class Listing:
    page: Page
    sort: str
    headers: dict[str, Header]
    page_param: str
    query: str  # the query string without the page parameter, for the pager's links
    pages: list[int | None] = field(default_factory=list)  # page numbers to link, None = a gap

    @property
    def items(self) -> Any:
        return self.page.object_list

    def page_url(self, number: int) -> str:
        return f"?{self.query}&{self.page_param}={number}" if self.query else f"?{self.page_param}={number}"

    @property
    def links(self) -> list[dict[str, Any]]:
        return [
            {"number": n, "url": self.page_url(n) if n else "", "current": n == self.page.number}
            for n in self.pages
        ]

    @property
    def previous_url(self) -> str:
        return self.page_url(self.page.previous_page_number()) if self.page.has_previous() else ""

    @property
    def next_url(self) -> str:
        return self.page_url(self.page.next_page_number()) if self.page.has_next() else ""


def _page_numbers(current: int, last: int) -> list[int | None]:
    """First, last and the pages around the current one; ``None`` where numbers are skipped."""
    wanted = sorted({1, last, *range(max(1, current - 2), min(last, current + 2) + 1)})
    out: list[int | None] = []
    for n in wanted:
        if out and n - (out[-1] or 0) > 1:
            out.append(None)
        out.append(n)
    return out


def listing(
    request: HttpRequest,
    queryset: QuerySet,
    *,
    sorts: Mapping[str, str | tuple[str, ...]],
    default: str,
    per_page: int = PER_PAGE,
    prefix: str = "",
) -> Listing:
    """One page of ``queryset`` ordered by the request's ``sort`` (a key of ``sorts``, which maps
    each public key to the ORM field or fields it orders by; ``-key`` reverses it).

    ``default`` is the sort used when the request names none or an unknown one. Ties are broken
    by primary key, so a page boundary never shows a row twice."""
    page_param, sort_param = f"{prefix}page", f"{prefix}sort"
    requested = request.GET.get(sort_param, "")
    sort = requested if requested.lstrip("-") in sorts else default
    key = sort.lstrip("-")
    descending = sort.startswith("-")
    chosen = sorts[key]
    fields: tuple[str, ...] = chosen if isinstance(chosen, tuple) else (chosen,)
    order = [f"-{f}" if descending else f for f in fields]
    order.append("-pk" if descending else "pk")
    page = Paginator(queryset.order_by(*order), per_page).get_page(request.GET.get(page_param))

    base = request.GET.copy()
    base.pop(page_param, None)
    headers = {}
    for name in sorts:
        params: QueryDict = base.copy()
        params[sort_param] = f"-{name}" if name == key and not descending else name
        state = ("descending" if descending else "ascending") if name == key else "none"
        headers[name] = Header(url=f"?{params.urlencode()}", state=state)
    return Listing(
        page=page,
        sort=sort,
        headers=headers,
        page_param=page_param,
        query=base.urlencode(),
        pages=_page_numbers(page.number, page.paginator.num_pages),
    )
