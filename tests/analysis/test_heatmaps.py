"""Acceptance heatmaps on the comparison page (issue 23, part 3): task x draft position and task x
output position, from the comparison's acceptance tables, with hover text in words and a "not
measured" note for a candidate without per-step draft records."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

from console.analysis import plots
from console.analysis.comparison.schema import AcceptanceTables
from console.results.models import RequestResult

pytestmark = pytest.mark.django_db


@pytest.fixture
def experiment():
    from console.analysis.services import comparison_refresh
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=30, ks=(2, 4), loads="1x", repeats=1, seed=3)
    comparison_refresh(experiment_id=experiment.pk, n_boot=50)
    return experiment


def _figure(html: str, target: str) -> dict | None:
    """A figure's data as the page embeds it (console.figures), None when it is not there."""
    found = re.search(rf'data-target="{target}"[^>]*>(.*?)</script>', html, re.S)
    return json.loads(found.group(1)) if found else None


def _section(html: str) -> str:
    start = html.index('id="acceptance-heatmaps"')
    return html[start : html.index("</section>", start)]


def _page(client, experiment) -> str:
    return client.get(f"/analysis/experiments/{experiment.pk}/").content.decode()


def test_it_draws_task_by_draft_position_acceptance_per_candidate(viewer_client, experiment):
    from console.analysis.selectors import comparison_summary_for_experiment

    html = _page(viewer_client, experiment)
    fig = _figure(_section(html), "fig-acc-task-draftpos")
    assert fig is not None
    layout = fig["layout"]
    assert (
        layout["xaxis"]["title"]["text"] == "draft position j" and layout["yaxis"]["title"]["text"] == "task"
    )
    traces = fig["data"]
    assert [t["type"] for t in traces] == ["heatmap", "heatmap"]
    assert [t["name"] for t in traces] == ["ngram k=2 at 1x", "ngram k=4 at 1x"]
    assert [t.get("visible", True) for t in traces] == [True, False]  # the menu shows one at a time
    assert [b["label"] for b in layout["updatemenus"][0]["buttons"]] == ["ngram k=2 at 1x", "ngram k=4 at 1x"]
    summary = comparison_summary_for_experiment(experiment=experiment)
    k4 = traces[1]
    assert k4["x"] == ["1", "2", "3", "4"] and k4["y"] == ["chat", "code", "json", "math", "tool_call"]
    stored = {
        (r.task, str(r.position)): r for r in summary.acceptance.by_task_position if r.arm == "ngram k=4"
    }
    for i, task in enumerate(k4["y"]):
        for j, position in enumerate(k4["x"]):
            row = stored[(task, position)]
            assert k4["z"][i][j] == pytest.approx(row.rate)
            assert k4["customdata"][i][j] == [row.proposed, row.accepted]
    # Hover in words, with the rate as a percentage and the counts behind it.
    assert (
        "draft position %{x}" in k4["hovertemplate"]
        and "accepted when proposed: %{z:.0%}" in k4["hovertemplate"]
    )
    assert "of %{customdata[0]:,} proposals accepted" in k4["hovertemplate"]
    assert k4["zmin"] == 0 and k4["zmax"] == 1 and k4["colorbar"]["tickformat"] == ".0%"


def test_it_draws_task_by_output_position_acceptance_in_position_order(viewer_client, experiment):
    from console.analysis.selectors import comparison_summary_for_experiment

    fig = _figure(_section(_page(viewer_client, experiment)), "fig-acc-task-outpos")
    assert fig is not None
    assert fig["layout"]["xaxis"]["title"]["text"] == "output tokens (range)"
    assert fig["layout"]["yaxis"]["title"]["text"] == "task"
    k2 = fig["data"][0]
    summary = comparison_summary_for_experiment(experiment=experiment)
    rows = [r for r in summary.acceptance.by_task_output_position if r.arm == "ngram k=2" and r.drafted]
    starts = {r.position_bucket: r.position_start for r in rows}
    assert k2["x"] == sorted(starts, key=starts.get) and k2["x"][0] == "0-16"  # by position, not as text
    stored = {(r.task, r.position_bucket): r for r in rows}
    for i, task in enumerate(k2["y"]):
        for j, bucket in enumerate(k2["x"]):
            row = stored.get((task, bucket))
            assert k2["z"][i][j] == (None if row is None else pytest.approx(row.acceptance_rate))
    assert "output tokens %{x}" in k2["hovertemplate"] and "drafted tokens accepted" in k2["hovertemplate"]


def test_it_says_not_measured_for_a_candidate_without_per_step_draft_records(viewer_client, experiment):
    from console.analysis.services import comparison_refresh

    assert "heatmap-not-measured" not in _section(_page(viewer_client, experiment))
    # An OpenAI-compatible server that streams no per-step counts: the k=2 arm's steps are gone.
    RequestResult.objects.filter(run__experiment=experiment, run__arm__label="ngram k=2").update(
        drafted=[], accepted=[]
    )
    comparison_refresh(experiment_id=experiment.pk, n_boot=50, force=True)
    section = _section(_page(viewer_client, experiment))
    notes = re.findall(r'<p class="muted heatmap-not-measured"[^>]*>(.*?)</p>', section)
    assert len(notes) == 1 and "not measured</span> ngram k=2 at 1x: no per-step draft records" in notes[0]
    for target in ("fig-acc-task-draftpos", "fig-acc-task-outpos"):
        fig = _figure(section, target)
        assert fig is not None and [t["name"] for t in fig["data"]] == ["ngram k=4 at 1x"]
        assert "updatemenus" not in fig["layout"]  # one arm left: no menu, its name in the title
        assert "ngram k=4 at 1x" in fig["layout"]["title"]["text"].replace("<br>", " ")
    RequestResult.objects.filter(run__experiment=experiment).update(drafted=[], accepted=[])
    comparison_refresh(experiment_id=experiment.pk, n_boot=50, force=True)
    section = _section(_page(viewer_client, experiment))
    assert (
        _figure(section, "fig-acc-task-draftpos") is None and _figure(section, "fig-acc-task-outpos") is None
    )
    assert section.count('<span class="badge na">not measured</span>') == 2


def _tables(**rows) -> AcceptanceTables:
    empty: dict[str, list] = {name: [] for name in AcceptanceTables.model_fields}
    return AcceptanceTables.model_validate(empty | rows)


def test_a_heatmap_cell_is_the_rate_of_its_task_and_position():
    def position(task, j, proposed, accepted):
        return {"arm": "draft", "load": "1x", "task": task, "position": j, "proposed": proposed,
                "accepted": accepted, "drafts": 10, "rate_per_draft": accepted / 10, "rate": accepted / proposed}  # fmt: skip

    tables = _tables(
        by_task_position=[position("math", 2, 8, 2), position("code", 1, 10, 9), position("math", 1, 10, 6)]
    )
    heads = [
        SimpleNamespace(arm=a, load="1x", is_baseline=a == "base")
        for a in ("base", "draft", "server", "again")
    ]
    flags = [
        SimpleNamespace(arm=a, load="1x", speculative=a != "again") for a in ("draft", "server", "again")
    ]
    comparison = SimpleNamespace(acceptance=tables, headline=heads, speculation=flags)
    out = plots.acceptance_heatmaps(comparison)  # type: ignore[arg-type]
    assert [div_id for div_id, _ in out["figures"]] == ["acc-task-draftpos"]  # no output-position rows
    # A candidate with no rows is not measured; the baseline and an A/A arm (configured not to
    # speculate) are neither drawn nor flagged.
    assert out["not_measured"] == ["server at 1x"]
    fig = plots.acceptance_heatmap(
        {
            "draft at 1x": [
                ("math", "1", 0.6, (10, 6)),
                ("code", "1", 0.9, (10, 9)),
                ("math", "2", 0.25, (8, 2)),
            ]
        },
        title="t",
        x_title="draft position j",
        hover=plots.HEAT_DRAFT,
    )
    heat = fig.data[0]
    assert list(heat.y) == ["code", "math"] and list(heat.x) == ["1", "2"]
    assert [list(r) for r in heat.z] == [[0.9, None], [0.6, 0.25]]  # code never proposed a 2nd token
    assert [list(map(list, r)) for r in heat.customdata] == [[[10, 9], [0, 0]], [[10, 6], [8, 2]]]
