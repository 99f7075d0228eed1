"""Object-level rules (docs/authorization.md): an experiment is started, cancelled and retried,
a trace deleted, by its creator or an approver; never by another engineer, nor by a viewer."""

from __future__ import annotations

import pytest

from console.experiments.models import Experiment, Run
from console.traces.models import Trace
from tests.decisions.factories import experiment_make


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def colleague(db):
    from console.accounts.services import user_create

    return user_create(username="carl-engineer", password="x" * 10, role="engineer")


def _client(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


def test_it_refuses_to_cancel_a_colleagues_experiment(engineer, colleague, api_token_for, client):
    experiment = experiment_make(created_by=engineer)
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.RUNNING)
    Run.objects.filter(experiment=experiment).update(status=Run.Status.QUEUED)
    page = _client(colleague).post(f"/experiments/{experiment.pk}/cancel/")
    assert page.status_code == 403
    assert f"only its creator or an approver of its team may cancel experiment #{experiment.pk}" in page.content.decode()
    api = client.post(f"/api/experiments/{experiment.pk}/cancel", **api_token_for(colleague))
    assert api.status_code == 403 and "only its creator or an approver" in api.json()["error"]
    assert set(experiment.runs.values_list("status", flat=True)) == {"queued"}
    assert Experiment.objects.get(pk=experiment.pk).status == "running"


def test_it_lets_an_approver_cancel_anyones_experiment(engineer, approver):
    experiment = experiment_make(created_by=engineer)
    Experiment.objects.filter(pk=experiment.pk).update(status=Experiment.Status.RUNNING)
    Run.objects.filter(experiment=experiment).update(status=Run.Status.QUEUED)
    assert _client(approver).post(f"/experiments/{experiment.pk}/cancel/").status_code == 302
    assert set(experiment.runs.values_list("status", flat=True)) == {"cancelled"}


def test_it_refuses_to_retry_a_colleagues_run(engineer, colleague):
    experiment = experiment_make(created_by=engineer)
    run = experiment.runs.first()
    Run.objects.filter(pk=run.pk).update(status=Run.Status.FAILED, error="boom")
    response = _client(colleague).post(f"/experiments/{experiment.pk}/runs/{run.pk}/retry/")
    assert response.status_code == 403 and b"may retry runs of experiment" in response.content
    assert Run.objects.get(pk=run.pk).status == "failed"


def test_it_leaves_an_experiment_nobody_created_to_approvers(engineer, approver):
    experiment = experiment_make(created_by=None)
    assert _client(engineer).post(f"/experiments/{experiment.pk}/start/").status_code == 403
    assert _client(approver).post(f"/experiments/{experiment.pk}/start/").status_code == 302


def test_it_refuses_to_delete_a_colleagues_trace(engineer, colleague, approver):
    trace = experiment_make(created_by=engineer).trace
    Trace.objects.filter(pk=trace.pk).update(uploaded_by=engineer)
    Experiment.objects.filter(trace=trace).delete()
    response = _client(colleague).post(f"/traces/{trace.pk}/delete/")
    assert response.status_code == 403 and f"may delete trace #{trace.pk}".encode() in response.content
    assert Trace.objects.filter(pk=trace.pk).exists()
    assert _client(approver).post(f"/traces/{trace.pk}/delete/").status_code == 302
    assert not Trace.objects.filter(pk=trace.pk).exists()
