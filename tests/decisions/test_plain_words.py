"""What the decision pages say is words, not internals (issue 22, point 7): the audit trail
shows no Python repr, a refusal names the gate's criteria by their titles, a new decision
proposes nothing until someone chooses, and a run shows its config as JSON."""

from __future__ import annotations

import re

import pytest

from console.decisions import services
from console.decisions.models import Decision
from tests.decisions.conftest import draft_make, submitted_make

REPR = re.compile(r"\{&#x27;|\{'|': |\bNone\b|\bTrue\b|\bFalse\b|\['")


@pytest.fixture(autouse=True)
def comparison(monkeypatch):
    from console.decisions import selectors
    from tests.decisions.factories import summary_make, summary_passing

    monkeypatch.setattr(selectors, "decision_comparison", lambda *, experiment: summary_make(summary_passing()))


def _audit_cells(html: str) -> list[str]:
    table = html[html.index("Audit trail") :]
    table = table[: table.index("</table>")]
    return re.findall(r'<td class="muted detail">(.*?)</td>', table, flags=re.S)


def test_the_audit_trail_says_in_words_what_each_event_did(experiment, engineer, approver, viewer_client):
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    summary["headline"][1]["peak_memory_bytes"] = 15.5 * 2**30  # memory headroom fails
    decision = submitted_make(experiment=experiment, author=engineer, summary=summary)
    services.decision_sign(
        decision=decision, signer=approver, verdict="approved", comment="ok", override_reason="a node first"
    )
    keep_off = draft_make(experiment=experiment, author=engineer, proposal="keep_off", title="stay off")
    cells = _audit_cells(viewer_client.get(f"/decisions/{decision.pk}/").content.decode())
    cells += _audit_cells(viewer_client.get(f"/decisions/{keep_off.pk}/").content.decode())
    text = " | ".join(cells)
    assert not REPR.search(text), text
    assert "proposal: Enable everywhere with the candidate config" in text
    assert "proposal: Keep speculation off" in text and "keep_off" not in text
    assert "changed: " in text and "rollback owner" in text and "rollback_owner" not in text
    assert "verdict: approved · overriding the gate on: Memory headroom" in text
    assert "memory_headroom" not in text


def test_a_refused_override_names_the_criteria_by_their_titles(experiment, engineer, approver):
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    summary["headline"][1]["peak_memory_bytes"] = 15.5 * 2**30
    decision = submitted_make(experiment=experiment, author=engineer, summary=summary)
    with pytest.raises(services.DecisionError) as refused:
        services.decision_sign(decision=decision, signer=approver, verdict="approved", comment="ok")
    assert str(refused.value) == "the gate does not pass (Memory headroom): approving needs an override reason"


def test_a_new_decision_proposes_nothing_until_someone_chooses(experiment, engineer_client):
    page = engineer_client.get(f"/decisions/new/?experiment={experiment.pk}").content.decode()
    select = page[page.index('name="proposal"') :]
    select = select[: select.index("</select>")]
    assert re.search(r'<option value="" selected>Choose a proposal</option>', select), select
    assert "selected" not in select.replace('<option value="" selected>', "")
    response = engineer_client.post(
        "/decisions/new/", {"experiment": experiment.pk, "traffic_class": "interactive", "title": "t"}
    )
    assert response.status_code == 200 and not Decision.objects.exists()
    assert "This field is required." in response.content.decode()


def test_versions_and_hardware_read_as_pairs_in_the_exports_never_as_a_repr():
    from console.decisions.words import plain_pairs

    hardware = {"cpu_model": "AMD EPYC", "dtype": {"dtype": "float32", "source": "cache", "probe": None}}
    assert plain_pairs(hardware) == "cpu model AMD EPYC, dtype (dtype float32, probe —, source cache)"
    assert plain_pairs({"gpu": True, "devices": [0, 1]}) == "devices 0, 1, gpu yes"


def test_the_markdown_export_shows_nested_hardware_without_a_repr(experiment, engineer, viewer_client):
    from console.experiments.models import Run

    Run.objects.filter(experiment=experiment).update(
        hardware={"cpu_model": "AMD EPYC", "dtype": {"dtype": "float32", "source": "cache"}}
    )
    decision = draft_make(experiment=experiment, author=engineer)
    text = viewer_client.get(f"/decisions/{decision.pk}/export.md").content.decode()
    hardware = [line for line in text.splitlines() if line.startswith("- Hardware")]
    assert hardware and all("{" not in line and "'" not in line for line in hardware), hardware
    assert "dtype (dtype float32, source cache)" in hardware[0]


# --- a keep-off decision is judged as that choice (issue 22, point 3) -------------------------


def _keep_off(experiment, engineer, summary):
    from tests.decisions.conftest import draft_complete

    decision = draft_make(experiment=experiment, author=engineer, proposal="keep_off", summary=summary, title="off")
    return draft_complete(decision, actor=engineer)


def test_keeping_off_fails_when_a_candidate_pays_and_signing_it_asks_for_a_reason(experiment, engineer, approver):
    from tests.decisions.factories import summary_passing

    decision = services.decision_submit(decision=_keep_off(experiment, engineer, summary_passing()), actor=engineer)
    gate = decision.gate
    assert gate["overall"] == "fail" and [c["key"] for c in gate["criteria"]] == ["keep_off"]
    assert gate["criteria"][0]["summary"].startswith("keeping speculation off forgoes a clear benefit: ngram: ")
    with pytest.raises(services.DecisionError, match="No candidate shows a clear benefit"):
        services.decision_sign(decision=decision, signer=approver, verdict="approved", comment="off")
    signed = services.decision_sign(
        decision=decision, signer=approver, verdict="approved", comment="off", override_reason="an incident"
    )
    assert signed.status == "approved"


def test_keeping_off_passes_when_no_candidate_beats_the_baseline_beyond_the_floor(experiment, engineer):
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    for row in [*summary["headline"], *summary["slices"]]:
        for d in row["deltas"]:  # the candidate's every latency interval straddles zero
            d["delta_lo"], d["delta_hi"], d["p_value"], d["p_holm"] = -0.001, 0.001, 0.9, 0.9
            d["verdict"] = "not distinguishable"
    gate = _keep_off(experiment, engineer, summary).gate
    assert gate["overall"] == "pass", gate["criteria"]
    assert gate["criteria"][0]["summary"].startswith("no candidate shows a clear benefit for interactive: ngram: ")


def test_keeping_off_without_a_noise_floor_says_so_and_nothing_else(experiment, engineer):
    from tests.decisions.factories import summary_passing

    summary = summary_passing()
    for floor in summary["noise_floor"]:
        floor["n_repeat_pairs"], floor["n_repeats"] = 0, 1
    criterion = _keep_off(experiment, engineer, summary).gate["criteria"][0]
    assert criterion["status"] == "not_measured"
    assert criterion["summary"] == (
        "the evidence cannot say whether a candidate pays: ngram: no noise floor: the baseline needs at least two repeats"
    )


def test_the_page_of_a_keep_off_decision_names_the_candidates_it_was_judged_against(
    experiment, engineer, viewer_client, approver_client
):
    from tests.decisions.factories import summary_passing

    decision = services.decision_submit(decision=_keep_off(experiment, engineer, summary_passing()), actor=engineer)
    html = viewer_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert "judged against every speculative candidate (ngram)" in html and "candidate none" not in html
    html = approver_client.get(f"/decisions/{decision.pk}/").content.decode()
    assert "The gate does not pass on No candidate shows a clear benefit" in html


def test_no_ratio_interval_reads_below_zero_nor_a_change_below_minus_100_percent():
    """Successes per accelerator-hour cannot fall below zero: a wide interval's lower end is
    clamped to a ratio of 0 (a change of -100%), as the gate's reason then says (issue 22, point 4)."""
    from console.decisions.gate.common import ratio_from_delta, ratio_interval

    wide = {"measured": True, "base": 100.0, "ratio": 1.396, "ratio_lo": -0.3141, "ratio_hi": 3.105}
    assert ratio_interval(wide) == (1.396, 0.0, 3.105)
    assert ratio_from_delta({"base": 100.0, "delta": 39.6, "delta_lo": -131.4, "delta_hi": 210.5})["ratio_lo"] == 0.0


def test_the_comparison_clamps_a_ratio_bound_below_zero():
    import numpy as np

    from console.analysis.comparison.intervals import paired_delta

    rng = np.random.default_rng(0)
    base = rng.uniform(0.5, 1.5, 2000)
    cand = np.abs(rng.normal(0.2, 3.0, 2000))  # a ratio distribution whose mean interval would reach below 0
    out = paired_delta(stat="mean", base_point=1.0, cand_point=1.0, base_boot=base, cand_boot=cand - 1.2, n_requests=200)
    assert out["ratio_lo"] >= 0.0 and out["ratio_hi"] >= out["ratio_lo"]


def test_a_number_row_gives_each_item_its_unit_and_never_mixes_a_p_value_into_seconds():
    from console.decisions import gate
    from console.decisions.export import value_text
    from tests.decisions.factories import summary_make, summary_passing

    assert value_text([0.0857, 0.08431, -0.001398, None, 0.003064], "s") == (
        "85.7 ms / 84.3 ms / -1.40 ms / — / 3.06 ms"
    )
    assert value_text([1.5, 2.0], "s") == "1.50 s / 2.00 s" and value_text(None, "s") == "—"
    facts = gate.gate_facts_from_summary(summary_make(summary_passing()), candidate_arm="ngram", traffic_class="interactive")
    latency = next(c for c in gate.gate_evaluate(facts, None, traffic_class="interactive")["criteria"] if c["key"] == "latency_benefit")
    rows = {n["label"]: n for n in latency["numbers"]}
    holm = [n for label, n in rows.items() if label.endswith("Holm-adjusted p")]
    assert holm and all(n["unit"] == "" for n in holm)
    assert not any("Holm" in label for label, n in rows.items() if n["unit"] == "s")
