"""The checklist's separate-gate line for a cross-vocabulary draft: asked only when the
candidate's runs recorded a draft with another tokenizer, and the engineer must answer it."""

from __future__ import annotations

from console.decisions.checklist import checklist_merge, checklist_prefill, checklist_unanswered

CROSS = {"transformers": "4.57", "draft_tokenizer": "different (universal assisted)"}
SAME = {"transformers": "4.57", "draft_tokenizer": "same"}


def _evidence(candidate_versions, other_versions=None) -> dict:
    configs = [
        {"arm": "base", "is_baseline": True, "content_hash": "h0"},
        {"arm": "draft 0.5B", "is_baseline": False, "content_hash": "h1"},
        {"arm": "other", "is_baseline": False, "content_hash": "h2"},
    ]
    return {
        "baseline": {"engine": "hf", "content_hash": "h0"},
        "candidate": {"engine": "hf", "content_hash": "h1"},
        "configs": configs,
        "versions": {"base": {"transformers": "4.57"}, "draft 0.5B": candidate_versions, "other": other_versions or {}},
    }


def test_it_asks_for_a_separate_gate_when_the_candidate_drafts_across_vocabularies():
    items = checklist_prefill(_evidence(CROSS))
    item = next(i for i in items if i["key"] == "cross_vocabulary_gate")
    assert item["source"] == "engineer" and item["answer"] is None
    assert "separate gate" in item["question"] and "greedy-only" in item["question"]
    assert "draft 0.5B" in item["detail"]
    assert "cross_vocabulary_gate" in checklist_unanswered(items)
    answered = checklist_merge(items, {"cross_vocabulary_gate": {"answer": "yes", "note": "greedy gate #12"}})
    assert "cross_vocabulary_gate" not in checklist_unanswered(answered)


def test_it_leaves_the_line_out_for_a_same_vocabulary_candidate():
    for evidence in (_evidence(SAME, other_versions=CROSS), _evidence(SAME) | {"candidate": {}}):
        keys = [i["key"] for i in checklist_prefill(evidence)]
        assert "cross_vocabulary_gate" not in keys and "rollback_plan" in keys


def test_it_puts_the_line_on_a_decision_and_stores_the_engineers_answer(db, experiment, engineer):
    from console.decisions import services
    from console.experiments.models import Run
    from tests.decisions.conftest import draft_complete, draft_make

    Run.objects.filter(experiment=experiment, arm__label="ngram").update(versions=CROSS)
    decision = draft_complete(draft_make(experiment=experiment, author=engineer), actor=engineer)
    item = next(i for i in decision.checklist if i["key"] == "cross_vocabulary_gate")
    assert item["answer"] is None and "arm ngram" in item["detail"]
    decision = services.decision_update(
        decision=decision,
        actor=engineer,
        changes={"checklist_answers": {**(decision.checklist_answers or {}), "cross_vocabulary_gate": {"answer": "no"}}},
    )
    assert {i["key"]: i["answer"] for i in decision.checklist}["cross_vocabulary_gate"] == "no"


def test_it_has_no_such_line_on_a_same_vocabulary_decision(db, experiment, engineer):
    from tests.decisions.conftest import draft_make

    decision = draft_make(experiment=experiment, author=engineer)
    assert "cross_vocabulary_gate" not in {i["key"] for i in decision.checklist}
