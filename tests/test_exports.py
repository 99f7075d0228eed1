"""The shared export helpers: CSV cells that cannot become formulas, Markdown that cannot become
structure, links that cannot leave the site. The Markdown is checked by a real CommonMark parser."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from console.exports import (
    csv_cell,
    markdown_block,
    markdown_code,
    markdown_inline,
    site_path,
    site_path_problem,
)

FUZZ = settings(
    max_examples=int(os.environ.get("SPECREVIEW_FUZZ_EXAMPLES", "200")), deadline=None, database=None
)
# CommonMark plus the GitHub extensions a Markdown viewer is likely to have on
MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
STRUCTURE = {
    "heading_open",
    "html_block",
    "html_inline",
    "link_open",
    "image",
    "code_block",
    "fence",
    "code_inline",
    "blockquote_open",
    "hr",
    "table_open",
    "em_open",
    "strong_open",
    "s_open",
    "bullet_list_open",
    "ordered_list_open",
}


def _types(text: str) -> list[str]:
    out = []
    for token in MD.parse(text):
        out.append(token.type)
        out.extend(child.type for child in token.children or [])
    return out


def _text(text: str) -> str:
    """What a reader sees: the rendered text content."""
    return "".join(
        child.content if child.type == "text" else " "
        for token in MD.parse(text)
        if token.type == "inline"
        for child in token.children or []
    )


@pytest.mark.parametrize("value", ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"])
def test_it_neutralises_csv_cells_a_spreadsheet_would_run(value):
    assert csv_cell(value) == "'" + value


@pytest.mark.parametrize("value", ["plain", "a=b", "", 3, -2.5, None])
def test_it_leaves_other_csv_cells_alone(value):
    assert csv_cell(value) == value


HOSTILE = [
    "# Sign-off",
    "x\n\n## Sign-off\n\n- **approved** by the CEO",
    "<script>alert(1)</script>",
    "<!-- hidden -->",
    "[click](javascript:alert(1)) ![img](http://x/y.png)",
    "1. first\n2) second",
    "> quoted",
    "```\ncode\n```",
    "    indented code",
    "Title\n=====",
    "Title\n---",
    "| a | b |\n|---|---|\n| 1 | 2 |",
    "***",
    "<http://auto.link>",
    "&lt;b&gt; &amp; &#65;",
    "~~gone~~ *em* __strong__ `code`",
    "[ref]: http://evil.example",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_it_escapes_markdown_so_text_stays_text(text):
    item = "- Comment: " + markdown_inline(text)
    types = _types(item)
    assert types.count("bullet_list_open") == 1 and types.count("list_item_open") == 1
    assert not (set(types) & STRUCTURE - {"bullet_list_open"}), types
    assert not (set(_types(markdown_block(text))) & STRUCTURE)
    assert _text(markdown_inline(text)) == " ".join(text.split())


# Markdown's own characters, dense enough to form every construct, plus anything else
markdownish = st.text(alphabet=st.sampled_from(list("#-+*=>[]()!<>&`_|~\\:/1. \n\tax")), max_size=60)


@FUZZ
@given(markdownish | st.text(max_size=80))
def test_it_never_lets_arbitrary_text_make_markdown_structure(text):
    assert not (set(_types("- " + markdown_inline(text))) & STRUCTURE - {"bullet_list_open"})
    assert not (set(_types(markdown_block(text))) & STRUCTURE)


printable = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80)


@FUZZ
@given(printable)
def test_it_shows_the_text_exactly_as_typed(text):
    # a paragraph of its own (a leading word keeps CommonMark from trimming the text's own indentation)
    assert _text("x " + markdown_inline(text)) == ("x " + " ".join(text.split())).rstrip()


def test_it_puts_only_safe_identifiers_in_code_spans():
    assert markdown_code("0" * 64) == "`" + "0" * 64 + "`"
    assert "code_inline" not in _types("x " + markdown_code("a` <b> `"))
    assert _text("x " + markdown_code("a` <b> `")) == "x a` <b> `"


@pytest.mark.parametrize("ref", ["/policies/12/", "/policies/12/?k=4#rules"])
def test_it_links_paths_on_this_site(ref):
    assert site_path_problem(ref) is None and site_path(ref) == ref


@pytest.mark.parametrize(
    "ref",
    [
        "//evil.example/p",
        "/\\evil.example",
        "\\\\evil",
        "http://evil.example",
        "https://x",
        "javascript:alert(1)",
    ]
    + [" JavaScript:alert(1)", "data:text/html,<b>", "/policies/1/\n<x>"],
)
def test_it_refuses_links_that_leave_the_site(ref):
    assert site_path_problem(ref) is not None and site_path(ref) == ""


def test_it_keeps_a_plain_policy_name_as_text():
    assert site_path_problem("router v2 (k=4 for code)") is None
    assert site_path("router v2 (k=4 for code)") == ""
