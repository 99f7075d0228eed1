"""No page, export or API response ever shows another team's object, or raw text its reader may not
read (issue 24): hypothesis draws a user (a role, or none, in each of two teams, raw text on, off
or as the role), a way in (a session, or a token of one of the user's teams), a route of the
console (every GET of the authorisation matrix: pages, exports, the API) and whose objects the
route names, and searches the response for unique marker strings planted in each team's names,
prompts, references and outputs.

The world is built once per module (two teams, each with a trace, an experiment with its runs and
results, a policy, a submitted decision, and signed decisions with a running and a paused rollout
whose pool selector and reason carry the team's markers); each request runs in a savepoint rolled
back after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.world import rollouts_make, runs_results_policy, world_rolled_back
from tests.test_authorization_matrix import MATRIX, concrete

TEAMS = ("alpha", "beta")
# None: not a member; "engineer-noraw" / "viewer-raw": the membership overrides raw text.
MEMBERSHIPS = (None, "viewer", "engineer", "approver", "engineer-noraw", "viewer-raw")
GET_ROUTES = sorted(
    key.split(" ", 1)[1]
    for key in MATRIX
    if key.startswith("GET ") and key not in ("GET /admin/*", "GET /accounts/login/", "GET /healthz")
)


def markers(team: str) -> dict[str, str]:
    """Unique strings per team: names anyone of the team may see, and raw text."""
    tag = team.upper()
    return {
        "trace_name": f"{tag}-TRACE-NAME-5d1e",
        "experiment_name": f"{tag}-EXPERIMENT-NAME-8b2c",
        "decision_title": f"{tag}-DECISION-TITLE-a7f0",
        "prompt": f"{tag}-PROMPT-TEXT-3c9d",
        "reference": f"{tag}-REFERENCE-TEXT-e4a1",
        "output": f"{tag}-OUTPUT-TEXT-f2b8",
        "rollout_pool": f"{tag}-ROLLOUT-POOL-9c3e",  # the running rollout's candidate pool label
        "rollout_reason": f"{tag}-ROLLOUT-REASON-6a1d",  # why it was paused (then resumed)
    }


RAW_TEXT_KEYS = ("prompt", "reference", "output")


@dataclass
class World:
    users: dict[tuple[str | None, str | None], Any]
    ids: dict[str, dict[str, int]]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    with world_rolled_back(django_db_blocker, _world_build) as built:
        yield built


def _membership(user, team, spec: str | None) -> None:
    from console.accounts.services import membership_set

    if spec is None:
        return
    role, _, raw = spec.partition("-")
    membership_set(user=user, team=team, role=role, raw_text={"noraw": False, "raw": True}.get(raw))


def _team_objects(team, author, approvers) -> dict[str, int]:
    from console.decisions import services
    from console.experiments.models import Experiment
    from console.traces.models import Trace
    from tests.decisions.conftest import draft_complete, draft_make
    from tests.decisions.factories import experiment_make

    mark = markers(team.name)
    experiment = experiment_make(created_by=author)
    Trace.objects.filter(pk=experiment.trace_id).update(team=team, name=mark["trace_name"])
    Experiment.objects.filter(pk=experiment.pk).update(name=mark["experiment_name"])
    experiment.refresh_from_db()
    trace = experiment.trace
    trace.requests.update(prompt=f"say {mark['prompt']}", metadata={"reference": mark["reference"]})
    objects = runs_results_policy(experiment, output=f"{mark['output']} done", author=author)
    draft = draft_make(experiment=experiment, author=author, title=mark["decision_title"])
    submitted = draft_complete(
        draft_make(experiment=experiment, author=approvers[0], title=mark["decision_title"]),
        actor=approvers[1],
    )
    services.decision_submit(decision=submitted, actor=approvers[1])
    objects |= rollouts_make(
        experiment,
        author=approvers[0],
        signer=approvers[1],
        pool=mark["rollout_pool"],
        reason=mark["rollout_reason"],
        title=mark["decision_title"],
    )
    return objects | {
        "trace": trace.pk,
        "experiment": experiment.pk,
        "token": 0,
        "draft": draft.pk,
        "submitted": submitted.pk,
    }


def _world_build() -> World:
    from console.accounts.services import membership_remove, team_resolve, user_create

    teams = {name: team_resolve(name, create=True) for name in TEAMS}
    authors = {
        name: [
            user_create(username=f"iso-{name}-{i}", password="x" * 10, role="approver", team=teams[name])
            for i in range(2)
        ]
        for name in TEAMS
    }
    ids = {name: _team_objects(teams[name], authors[name][0], authors[name]) for name in TEAMS}
    users = {}
    for a in MEMBERSHIPS:
        for b in MEMBERSHIPS:
            user = user_create(username=f"iso-{a}-{b}", password="x" * 10, role="viewer", team=teams["alpha"])
            membership_remove(user=user, team=teams["alpha"])
            _membership(user, teams["alpha"], a)
            _membership(user, teams["beta"], b)
            users[(a, b)] = user
    return World(users=users, ids=ids)


def _reads_raw_text(spec: str | None) -> bool:
    """Engineers and approvers read raw text, viewers not, unless the membership says otherwise."""
    return spec in ("engineer", "approver", "viewer-raw")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    alpha=st.sampled_from(MEMBERSHIPS),
    beta=st.sampled_from(MEMBERSHIPS),
    objects_of=st.sampled_from(TEAMS),
    token_team=st.sampled_from(TEAMS),
)
def test_no_response_shows_another_team_s_objects_or_unreadable_raw_text(
    world, db, alpha, beta, objects_of, token_team
):
    """Each drawn user, whose objects and which token: every GET route of the console."""
    for route in GET_ROUTES:
        _check(world, route, {"alpha": alpha, "beta": beta}, objects_of=objects_of, token_team=token_team)


def _check(
    world: World, route: str, specs: dict[str, str | None], *, objects_of: str, token_team: str
) -> None:
    from console.accounts.middleware import API_PAGES
    from console.accounts.scopes import SCOPES
    from console.accounts.services import api_token_create

    user = world.users[(specs["alpha"], specs["beta"])]
    url = concrete(route, world.ids[objects_of])
    client = Client(raise_request_exception=False)
    headers = {}
    acting = dict(specs)
    with transaction.atomic():
        if url.startswith("/api/") and url not in API_PAGES:
            if specs[token_team] is None:
                transaction.set_rollback(True)
                return  # a token names a team of its user's
            headers["HTTP_AUTHORIZATION"] = (
                f"Bearer {api_token_create(user=user, scopes=SCOPES, team=token_team)}"
            )
            acting = {t: (s if t == token_team else None) for t, s in specs.items()}
        else:
            client.force_login(user)
        response = client.get(url, **headers)
        transaction.set_rollback(True)
    assert response.status_code < 500, f"{url}: {response.status_code}"
    body = (b"".join(response.streaming_content) if response.streaming else response.content).decode(
        "utf-8", "replace"
    )
    for team in TEAMS:
        mark = markers(team)
        if acting[team] is None:
            leaked = [k for k, v in mark.items() if v in body]
            assert not leaked, f"{url} showed a non-member of {team} its {leaked}"
        elif not _reads_raw_text(acting[team]):
            leaked = [k for k in RAW_TEXT_KEYS if mark[k] in body]
            assert not leaked, f"{url} showed {acting[team]} of {team} raw text {leaked}"


def test_the_markers_are_there_for_those_who_may_read_them(world, db):
    """The search above would pass on empty pages: a member who reads raw text sees every marker
    of their team somewhere (names on lists and pages, raw text on the run and trace pages)."""
    client = Client()
    client.force_login(world.users[("engineer", None)])
    ids = world.ids["alpha"]
    pages = [
        "/traces/",
        "/experiments/",
        "/decisions/",
        f"/traces/{ids['trace']}/",
        f"/analysis/runs/{ids['run']}/",
        f"/decisions/{ids['signed']}/rollouts/{ids['rollout']}/",
    ]
    body = "".join(client.get(p).content.decode() for p in pages)
    mark = markers("alpha")
    assert not [k for k, v in mark.items() if v not in body]
    assert not [v for v in markers("beta").values() if v in body]
