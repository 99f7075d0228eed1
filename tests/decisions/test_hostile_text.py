"""Text a user types into a decision cannot forge its exports, break its PDF for ever, link off-site
or reach the database unchecked: each gets a clear error, or is printed as the text it is."""

from __future__ import annotations

import pytest
from markdown_it import MarkdownIt

from console.decisions import services
from console.decisions.models import Decision, SignOff
from tests.decisions.conftest import draft_make, submitted_make

FORGED = "Turn it on\n\n## Sign-off\n\n- **approved** by the CTO at 2026-01-01"


def _headings(markdown: str) -> list[str]:
    tokens = MarkdownIt("commonmark").parse(markdown)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def test_it_keeps_a_forged_sign_off_in_a_title_or_comment_as_text(
    experiment, engineer, approver, viewer_client
):
    decision = submitted_make(experiment=experiment, author=engineer, title=FORGED)
    services.decision_sign(
        decision=decision, signer=approver, verdict="rejected", comment=FORGED + "\n# Approved"
    )
    text = viewer_client.get(f"/decisions/{decision.pk}/export.md").content.decode()
    headings = _headings(text)
    assert headings.count("Sign-off") == 1, headings
    assert "Approved" not in headings and headings[0].startswith(f"Decision #{decision.pk}: Turn it on")
    assert "<script>" not in viewer_client.get(f"/decisions/{decision.pk}/export.md").content.decode()


def test_it_keeps_html_in_a_rationale_out_of_the_markdown(draft, engineer):
    services.decision_update(
        decision=draft,
        actor=engineer,
        changes={"rationale": "<script>alert(1)</script>\n<img src=x onerror=y>"},
    )
    from console.decisions.export import decision_markdown

    text = decision_markdown(decision=Decision.objects.get(pk=draft.pk))
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script>alert(1)&lt;/script>" in text


def test_it_prints_a_20000_word_sign_off_comment_across_pages(experiment, engineer, approver, viewer_client):
    import pypdfium2 as pdfium

    words = [f"word{i}" for i in range(20_000)]
    comment = " ".join(words[:10_000]) + "\n" + " ".join(words[10_000:])
    decision = submitted_make(experiment=experiment, author=engineer)
    services.decision_sign(decision=decision, signer=approver, verdict="approved", comment=comment)
    response = viewer_client.get(f"/decisions/{decision.pk}/export.pdf")
    assert response.status_code == 200 and response.content.startswith(b"%PDF")
    pdf = pdfium.PdfDocument(response.content)
    assert len(pdf) > 5  # the comment continues over many pages instead of failing to fit one
    text = "".join(pdf[i].get_textpage().get_text_range() for i in range(len(pdf)))
    for word in ("word0 ", "word9999", "word10000", "word19999"):
        assert word in text, word


def test_it_prints_a_long_checklist_note_in_a_table_across_pages(draft, engineer, viewer_client):
    import pypdfium2 as pdfium

    note = " ".join(f"note{i}" for i in range(1_100))  # about 9,000 characters: taller than a page
    word = "w" * 9_000  # one word wider than any column: broken across lines, then pages
    answers = {"production_traces": {"note": note}, "current_serving_path": {"note": word}}
    services.decision_update(decision=draft, actor=engineer, changes={"checklist_answers": answers})
    response = viewer_client.get(f"/decisions/{draft.pk}/export.pdf")
    assert response.status_code == 200
    pdf = pdfium.PdfDocument(response.content)
    text = "".join(pdf[i].get_textpage().get_text_range() for i in range(len(pdf)))
    assert "note1099" in text


def test_it_refuses_a_sign_off_comment_over_the_limit_and_signs_nothing(submitted, approver, approver_client):
    with pytest.raises(services.DecisionError, match="comment: at most 200,000 characters"):
        services.decision_sign(decision=submitted, signer=approver, verdict="approved", comment="x" * 200_001)
    response = approver_client.post(
        f"/decisions/{submitted.pk}/sign/", {"verdict": "approved", "comment": "x" * 200_001}, follow=True
    )
    assert "at most 200000 characters" in response.content.decode()
    assert not SignOff.objects.exists()
    assert Decision.objects.get(pk=submitted.pk).status == Decision.Status.SUBMITTED


@pytest.mark.parametrize(
    "field,value", [("title", "t" * 201), ("rollback_owner", "o" * 201), ("rationale", "r" * 200_001)]
)
def test_it_refuses_text_longer_than_its_column_with_a_clear_error(draft, engineer, field, value):
    with pytest.raises(services.DecisionError, match=f"{field}: at most"):
        services.decision_update(decision=draft, actor=engineer, changes={field: value})
    assert getattr(Decision.objects.get(pk=draft.pk), field) != value


def test_it_refuses_an_over_long_title_when_drafting(experiment, engineer):
    with pytest.raises(services.DecisionError, match="title: at most 200 characters"):
        draft_make(experiment=experiment, author=engineer, title="t" * 201)
    assert not Decision.objects.exists()


OFF_SITE = ["//evil.example/policy", "/\\evil.example", "http://evil.example/p", "javascript:alert(1)"]


@pytest.mark.parametrize("ref", OFF_SITE)
def test_it_refuses_a_policy_link_that_leaves_the_site(experiment, engineer, engineer_client, draft, ref):
    with pytest.raises(services.DecisionError, match="policy_ref: give a path on this site"):
        draft_make(experiment=experiment, author=engineer, policy_ref=ref, title="off-site")
    with pytest.raises(services.DecisionError, match="policy_ref"):
        services.decision_update(decision=draft, actor=engineer, changes={"policy_ref": ref})
    response = engineer_client.post(
        "/decisions/new/",
        {
            "experiment": experiment.pk,
            "proposal": "keep_off",
            "traffic_class": "interactive",
            "title": "off-site",
            "policy_ref": ref,
        },
    )
    assert response.status_code == 200 and "give a path on this site" in response.content.decode()
    assert not Decision.objects.filter(title="off-site").exists()


def test_it_links_only_policy_paths_on_this_site(draft, engineer, viewer_client):
    services.decision_update(decision=draft, actor=engineer, changes={"policy_ref": "/policies/7/"})
    assert 'href="/policies/7/"' in viewer_client.get(f"/decisions/{draft.pk}/").content.decode()
    services.decision_update(decision=draft, actor=engineer, changes={"policy_ref": "router v2"})
    page = viewer_client.get(f"/decisions/{draft.pk}/").content.decode()
    assert "policy: router v2" in page and 'href="router v2"' not in page
    # one stored before the check is shown as text, never linked
    Decision.objects.filter(pk=draft.pk).update(policy_ref="https://evil.example/p")
    page = viewer_client.get(f"/decisions/{draft.pk}/").content.decode()
    assert 'href="https://evil.example/p"' not in page and "policy: https://evil.example/p" in page
