"""Who may call what: every URL pattern and API endpoint, every method it answers, every role.

The table is keyed by the URL path pattern (parameters written ``{name}``, whatever the
converter) and the HTTP method, never by view function, so it survives a view being rewritten
(the JSON API moving to another library keeps its URLs). A route the console serves that has
no entry here fails ``test_it_has_an_entry_for_every_route`` with its name: add the entry, and
with it the decision of who may call it (docs/authorization.md).

Roles are the three groups plus the people an object knows:
- ``creator``: the engineer who uploaded the trace, created the experiment and drafted the
  draft decision;
- ``drafter``, ``editor``, ``submitter``: the three approvers who drafted, edited and submitted
  the submitted decision (none of them may sign it);
- ``engineer``, ``approver``: one of each who took no part in anything;
- ``engineer_noraw``: an engineer of the team whose membership turns raw text off.

All of them are members of the team that owns every object (``home``). A second team (issue 24):
- ``other_viewer``, ``other_engineer``, ``other_approver``: members of the other team only;
  another team's object is not found (404, never 403, so its existence is not told), except
  where the route's permission is checked before anything is looked up and their role lacks it
  anywhere (403, whatever the id);
- ``mixed``: a viewer of ``home`` and an approver of the other team: on pages a viewer here (the
  permission is the one of the object's team), over the API with a token of the other team (a
  token acts in its one team: ``home``'s objects are not found).

The expectations of the second team's roles follow from each entry's kind (:func:`_other_team`),
and every GET answered to a role without raw text is searched for the planted prompt and output.

The world is built once; each check runs inside a savepoint that is rolled back, so every
role, and every test, sees the same world.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from console.accounts.middleware import API_PAGES
from console.accounts.scopes import SCOPES
from tests.support.world import world_rolled_back

HOME_ROLES = ("anonymous", "viewer", "engineer", "creator", "approver", "drafter", "editor", "submitter")
OTHER_TEAM = ("other_viewer", "other_engineer", "other_approver", "mixed")
ROLES = (*HOME_ROLES, "engineer_noraw", *OTHER_TEAM)
SIGNED_IN = ROLES[1:]
APPROVERS = ("approver", "drafter", "editor", "submitter")
# Who may not read the home team's raw text (on pages; over the API "mixed" acts in the other team).
NO_RAW_TEXT = ("anonymous", "viewer", "engineer_noraw", *OTHER_TEAM)
MARKERS = ("PROMPT-MARK-7f3a9c", "OUTPUT-MARK-c41be2")

OK, DENIED, LOGIN = "ok", "403", "login"  # ok: neither 401/403/404/405 nor a 5xx nor a login redirect
NOT_FOUND = "status 404"  # an object of someone else's the user may not even see


def everyone_signed_in() -> dict[str, str]:
    return {"anonymous": LOGIN} | dict.fromkeys(HOME_ROLES[1:], OK)


def public() -> dict[str, str]:
    return dict.fromkeys(HOME_ROLES, OK)


def engineers() -> dict[str, str]:
    """Any engineer or approver (a capability of the role, no object rule)."""
    return everyone_signed_in() | {"viewer": DENIED}


def creator_or_approver() -> dict[str, str]:
    return engineers() | {"engineer": DENIED}


def signer() -> dict[str, str]:
    """An approver who did not draft, edit or submit the decision."""
    return everyone_signed_in() | dict.fromkeys(
        ("viewer", "engineer", "creator", "drafter", "editor", "submitter"), DENIED
    )


def same_for_everyone(outcome: str) -> dict[str, str]:
    """Routes about one's own session or account, the same whatever the teams."""
    return {"anonymous": LOGIN} | dict.fromkeys(SIGNED_IN, outcome)


# "METHOD /path/{param}/" -> role -> expectation. Objects: traces/experiments/policies by the
# creator; "{pk}" under /decisions/ is the submitted decision unless the route edits a draft.
MATRIX: dict[str, dict[str, str]] = {
    "GET /": everyone_signed_in(),
    "GET /healthz": public(),
    "GET /accounts/login/": public(),
    "POST /accounts/login/": public(),  # a failed login re-renders the form
    "PUT /accounts/login/": public(),  # Django's LoginView treats PUT as POST
    "POST /accounts/logout/": same_for_everyone(LOGIN) | {"anonymous": LOGIN},  # back to the login page
    "GET /accounts/tokens/": everyone_signed_in(),  # one's own API tokens
    "POST /accounts/tokens/": everyone_signed_in(),
    "POST /accounts/tokens/{pk}/revoke/": same_for_everyone(NOT_FOUND) | {"creator": OK},  # the creator's
    # token: nobody else's tokens even exist for them
    "GET /admin/*": same_for_everyone("admin-login"),  # staff only
    # traces
    "GET /traces/": everyone_signed_in(),
    "GET /traces/upload/": engineers(),
    "POST /traces/upload/": engineers(),
    "GET /traces/{pk}/": everyone_signed_in(),
    "POST /traces/{pk}/delete/": creator_or_approver(),
    "GET /api/traces": everyone_signed_in(),
    "POST /api/traces": engineers(),
    "GET /api/traces/{id}": everyone_signed_in(),
    "GET /api/traces/{id}/requests": everyone_signed_in(),
    # experiments
    "GET /experiments/": everyone_signed_in(),
    "GET /experiments/new/": engineers(),
    "POST /experiments/new/": engineers(),
    "GET /experiments/{pk}/": everyone_signed_in(),
    "GET /experiments/{pk}/live/": everyone_signed_in(),
    "POST /experiments/{pk}/start/": creator_or_approver(),
    "POST /experiments/{pk}/cancel/": creator_or_approver(),
    "POST /experiments/{pk}/clone/": engineers(),  # the clone is the cloner's own experiment
    "POST /experiments/{pk}/runs/{run_pk}/retry/": creator_or_approver(),
    "GET /api/experiments": everyone_signed_in(),
    "POST /api/experiments": engineers(),
    "GET /api/experiments/{id}": everyone_signed_in(),
    "POST /api/experiments/{id}/cancel": creator_or_approver(),
    "GET /api/experiments/{id}/comparison": everyone_signed_in(),
    # analysis
    "GET /analysis/experiments/{pk}/": everyone_signed_in(),
    "GET /analysis/experiments/{pk}/results.csv": everyone_signed_in(),
    "GET /analysis/experiments/{pk}/comparison.json": everyone_signed_in(),
    "GET /analysis/runs/{pk}/": everyone_signed_in(),
    "GET /analysis/results/{a}/vs/{b}/": everyone_signed_in(),
    "POST /analysis/experiments/{pk}/recompute/": engineers(),  # idempotent: recomputes from stored runs
    # policies
    "GET /policies/": everyone_signed_in(),
    "GET /policies/new/": engineers(),
    "POST /policies/new/": engineers(),
    "GET /policies/{pk}/": everyone_signed_in(),
    "POST /policies/{pk}/adopt/": engineers(),  # stores the simpler rule the holdout preferred
    "GET /policies/{pk}/rules.json": everyone_signed_in(),
    "GET /policies/{pk}/vllm-serve.sh": everyone_signed_in(),
    "GET /policies/{pk}/litellm.yaml": everyone_signed_in(),
    "GET /policies/schedule/{pk}/": everyone_signed_in(),  # {pk}: an experiment
    "GET /policies/schedule/{pk}/schedule.json": everyone_signed_in(),
    "GET /api/experiments/{id}/schedule": everyone_signed_in(),
    "GET /api/policies": everyone_signed_in(),
    "POST /api/policies": engineers(),  # fits one (the fit form's checks)
    "GET /api/policies/{id}": everyone_signed_in(),
    "POST /api/policies/{id}/adopt": engineers(),  # the same over the API
    "GET /api/policies/{id}/deployment": everyone_signed_in(),
    # decisions
    "GET /decisions/": everyone_signed_in(),
    "GET /decisions/new/": engineers(),
    "POST /decisions/new/": engineers(),
    "GET /decisions/archive/": everyone_signed_in(),
    "GET /decisions/{pk}/": everyone_signed_in(),
    "GET /decisions/{pk}/edit/": engineers(),  # any engineer may edit a draft, and then never sign it
    "POST /decisions/{pk}/edit/": engineers(),
    "POST /decisions/{pk}/submit/": engineers(),
    "POST /decisions/{pk}/sign/": signer(),
    "GET /decisions/{pk}/export.md": everyone_signed_in(),
    "GET /decisions/{pk}/export.pdf": everyone_signed_in(),
    "GET /decisions/{pk}/bundle.json": everyone_signed_in(),
    "GET /api/decisions": everyone_signed_in(),
    "POST /api/decisions": engineers(),  # drafts one from an experiment of the caller's team
    "POST /api/decisions/{id}/submit": engineers(),  # a draft, like the page's submit
    "GET /api/decisions/{id}": everyone_signed_in(),
    "PATCH /api/decisions/{id}": engineers(),
    "POST /api/decisions/{id}/signoff": signer(),
    # rollouts: {decision} is a signed decision, {pk} its running rollout (resume: a paused one's;
    # starting one: a signed decision with none)
    "GET /decisions/{decision}/rollouts/new/": engineers(),  # accounts.draft_decision in the team
    "POST /decisions/{decision}/rollouts/new/": engineers(),
    "GET /decisions/{decision}/rollouts/export/{tool}.yaml": everyone_signed_in(),
    "GET /decisions/{decision}/rollouts/{pk}/": everyone_signed_in(),
    "POST /decisions/{decision}/rollouts/{pk}/act/": engineers(),
    "GET /api/decisions/{id}/rollouts": everyone_signed_in(),
    "POST /api/decisions/{id}/rollouts": engineers(),
    "GET /api/decisions/{id}/rollout-export": everyone_signed_in(),
    "GET /api/rollouts/{id}": everyone_signed_in(),
    "POST /api/rollouts/{id}/pause": engineers(),
    "POST /api/rollouts/{id}/resume": engineers(),
    "POST /api/rollouts/{id}/stop": engineers(),
    "POST /api/rollouts/{id}/rolled-back": engineers(),
    "GET /api/openapi.json": everyone_signed_in(),
    "GET /api/docs/": everyone_signed_in(),  # the interactive docs of the document above
}


def _names_an_object(path: str) -> bool:
    return "{" in path and not path.startswith("/accounts/")


def _other_team(key: str, expected: dict[str, str]) -> dict[str, str]:
    """The second team's roles for an entry written for the home team, from the entry's kind:
    everyone's (a list, or an object: then not found), an engineer's or approver's (the
    permission is checked first: a role without it anywhere is refused, whatever the id), a
    signer's. ``mixed`` is a viewer of home on pages and an approver of the other team over the API."""
    method, path = key.split(" ", 1)
    if set(OTHER_TEAM) <= set(expected):
        return expected
    obj = _names_an_object(path)
    api = path.startswith("/api/") and path != "/api/docs/"
    if expected["viewer"] == OK:  # everyone's
        found = NOT_FOUND if obj else OK
        roles = {"other_viewer": found, "other_engineer": found, "other_approver": found}
        roles["mixed"] = found if api else OK
    elif expected["approver"] == OK and expected["drafter"] == OK:  # an engineer's (or creator's)
        found = NOT_FOUND if obj else OK
        roles = {"other_viewer": DENIED, "other_engineer": found, "other_approver": found}
        roles["mixed"] = found if api else (DENIED if obj else OK)
    elif expected["approver"] == OK:  # a signer's
        roles = {"other_viewer": DENIED, "other_engineer": DENIED, "other_approver": NOT_FOUND}
        roles["mixed"] = NOT_FOUND if api else DENIED
    else:
        raise AssertionError(f"{key}: write its second-team roles out")
    return expected | roles


for _key, _expected in MATRIX.items():
    MATRIX[_key] = _other_team(_key, _expected) | {"engineer_noraw": _expected["engineer"]}


# Routes that act on a draft decision rather than the submitted one.
ON_DRAFT = {
    "/decisions/{pk}/edit/",
    "/decisions/{pk}/submit/",
    "/api/decisions/{id}",
    "/api/decisions/{id}/submit",
}
# Rollout routes that start one (on the signed decision with none) or resume one (the paused one).
STARTS_ROLLOUT = {"GET /decisions/{decision}/rollouts/new/", "POST /decisions/{decision}/rollouts/new/",
                  "POST /api/decisions/{id}/rollouts"}
ON_PAUSED_ROLLOUT = {"/api/rollouts/{id}/resume"}
QUERY = {"/api/decisions/{id}/rollout-export": "?tool=flagger"}
MUTATIONS = ("POST", "PUT", "PATCH", "DELETE")
_START = {"prometheus": "world", "candidate_pool": 'pool="speculative"', "control_pool": 'pool="baseline"'}
# What a mutation sends, so that a role allowed to call it succeeds (the rest of the API's POSTs: "{}").
BODIES: dict[str, dict[str, Any]] = {
    "POST /decisions/{decision}/rollouts/new/": _START | {"stages": "10:30, 100:60", "alpha": "0.05"},
    "POST /decisions/{decision}/rollouts/{pk}/act/": {"act": "pause", "reason": "x"},
    "POST /api/decisions/{id}/rollouts": _START | {"stages": [{"share": 10, "minutes": 30}]},
    "POST /api/rollouts/{id}/pause": {"reason": "x"},
    "POST /api/rollouts/{id}/stop": {"reason": "x"},
    "POST /api/rollouts/{id}/rolled-back": {"reason": "x"},
}


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def normalise(route: str) -> str:
    """``decisions/<int:pk>/`` -> ``/decisions/{pk}/``; the admin site is one entry."""
    route = "/" + route.lstrip("^").rstrip("$").replace("\\Z", "")
    if route.startswith("/admin/"):
        return "/admin/*"
    route = re.sub(r"<(?:[a-z_]+:)?([a-z_]+)>", r"{\1}", route)
    return re.sub(r"\(\?P<([a-z_]+)>[^)]*\)", r"{\1}", route)


def served_routes() -> set[str]:
    return {normalise(r) for r in _walk(get_resolver().url_patterns)}


def test_it_has_an_entry_for_every_route():
    listed = {key.split(" ", 1)[1] for key in MATRIX}
    missing = sorted(served_routes() - listed)
    assert not missing, (
        "routes with no entry in tests/test_authorization_matrix.py MATRIX (decide who may call "
        f"them, per method, and write it in docs/authorization.md): {', '.join(missing)}"
    )
    stale = sorted(listed - served_routes())
    assert not stale, f"MATRIX lists routes the console no longer serves: {', '.join(stale)}"


def test_it_gives_every_entry_every_role():
    incomplete = [key for key, expected in MATRIX.items() if set(expected) != set(ROLES)]
    assert not incomplete, f"entries without an expectation for each of {ROLES}: {incomplete}"


@dataclass
class World:
    users: dict[str, Any]
    ids: dict[str, int]


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker):
    with world_rolled_back(django_db_blocker, _world_build) as built:
        yield built


def _world_build() -> World:
    from console.accounts.services import membership_set, team_resolve, user_create
    from console.accounts.teams import team_default
    from console.decisions import services
    from tests.decisions.conftest import draft_complete, draft_make
    from tests.decisions.factories import experiment_make
    from tests.support.world import rollouts_make, runs_results_policy

    home, other = team_default(), team_resolve("other", create=True)
    role_of = {
        "viewer": "viewer",
        "engineer": "engineer",
        "creator": "engineer",
        "engineer_noraw": "engineer",
    }
    role_of |= {"other_viewer": "viewer", "other_engineer": "engineer", "mixed": "viewer"}
    users = {
        name: user_create(
            username=f"m-{name}",
            password="x" * 10,
            role=role_of.get(name, "approver"),
            team=other if name.startswith("other_") else home,
        )
        for name in SIGNED_IN
    }
    membership_set(user=users["engineer_noraw"], team=home, role="engineer", raw_text=False)
    membership_set(user=users["mixed"], team=other, role="approver")
    experiment = experiment_make(created_by=users["creator"])
    trace = experiment.trace
    trace.uploaded_by = users["creator"]
    trace.save(update_fields=["uploaded_by"])
    trace.requests.filter(pk=trace.requests.order_by("position").first().pk).update(
        prompt=f"say {MARKERS[0]}"
    )
    objects = runs_results_policy(experiment, output=f"{MARKERS[1]} said", author=users["creator"])
    from console.accounts.models import ApiToken
    from console.accounts.services import api_token_create

    api_token_create(user=users["creator"], name="matrix", scopes=SCOPES, team=home)
    token = ApiToken.objects.get(user=users["creator"], name="matrix")
    draft = draft_make(experiment=experiment, author=users["creator"])
    submitted = draft_complete(
        draft_make(experiment=experiment, author=users["drafter"]), actor=users["editor"]
    )
    services.decision_submit(decision=submitted, actor=users["submitter"])
    # signed by an approver who is none of the roles: "approver" took part in nothing
    signer = user_create(username="m-signer", password="x" * 10, role="approver", team=home)
    objects |= rollouts_make(
        experiment, author=users["creator"], signer=signer, pool="speculative-world", reason="canary paused"
    )
    return World(
        users=users,
        ids=objects
        | {
            "trace": trace.pk,
            "experiment": experiment.pk,
            "token": token.pk,
            "draft": draft.pk,
            "submitted": submitted.pk,
        },
    )


def concrete(path: str, ids: dict[str, int], method: str = "GET") -> str:
    if path == "/admin/*":
        return "/admin/"
    parts = path.strip("/").split("/")
    first = parts[1] if parts[0] in ("api", "analysis") else parts[0]
    pk = {
        "traces": ids["trace"],
        "experiments": ids["experiment"],
        "policies": ids["policy"],
        "accounts": ids["token"],
        "decisions": ids["draft"] if path in ON_DRAFT else ids["submitted"],
    }.get(first)
    if path.startswith("/analysis/runs/"):
        pk = ids["run"]
    if path.startswith("/policies/schedule/"):  # an experiment's schedule
        pk = ids["experiment"]
    decision = None
    if "/rollout" in path:
        decision = ids["signed_idle"] if f"{method} {path}" in STARTS_ROLLOUT else ids["signed"]
        pk = ids["paused_rollout"] if path in ON_PAUSED_ROLLOUT else ids["rollout"]
        if path.startswith("/api/decisions/"):
            pk = decision
    # the JSON API names its path parameter "id" (as its OpenAPI document does), the pages "pk"
    values = {
        "pk": pk,
        "id": pk,
        "run_pk": ids["failed_run"],
        "a": ids["result_a"],
        "b": ids["result_b"],
        "decision": decision,
        "tool": "argo",
    }
    out = re.sub(r"\{([a-z_]+)\}", lambda m: str(values[m.group(1)]), path) + QUERY.get(path, "")
    assert "None" not in out, f"no sample object for {path}"
    return out


def call(client: Client, method: str, url: str, *, api_token: str | None, body: dict[str, Any] | None = None):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {api_token}"} if api_token else {}
    kwargs: dict[str, Any] = {"data": body} if body else {}
    if url.startswith("/api/") and method in ("POST", "PUT", "PATCH"):
        kwargs = {"data": json.dumps(body or {}), "content_type": "application/json"}
    return getattr(client, method.lower())(url, **kwargs, **headers)


def outcome(response, url: str) -> str:
    location = response.get("Location", "") if response.status_code in (301, 302, 303) else ""
    if location.startswith("/accounts/login/") or (url.startswith("/api/") and response.status_code == 401):
        return LOGIN
    if location.startswith("/admin/login/"):
        return "admin-login"
    if response.status_code == 403:
        return DENIED
    if response.status_code in (401, 404, 405) or response.status_code >= 500:
        return f"status {response.status_code}"
    return OK


def check(world: World, method: str, path: str, role: str) -> str:
    return outcome(respond(world, method, path, role), concrete(path, world.ids, method))


def respond(world: World, method: str, path: str, role: str):
    """``role``'s answer to ``method`` on ``path`` (with its body), in a savepoint rolled back."""
    url = concrete(path, world.ids, method)
    client = Client(raise_request_exception=False)
    token = None
    if role != "anonymous":
        user = world.users[role]
        if url.startswith("/api/") and url not in API_PAGES:
            from console.accounts.services import api_token_create

            # every scope: this matrix is about roles (tests/accounts/test_token_scopes.py: scopes);
            # "mixed" calls with a token of its other team, everyone else with their one team's
            token = api_token_create(user=user, scopes=SCOPES, team="other" if role == "mixed" else None)
        else:
            client.force_login(user)
    with transaction.atomic():
        response = call(client, method, url, api_token=token, body=BODIES.get(f"{method} {path}"))
        transaction.set_rollback(True)  # the next role sees the same world
    if method == "GET" and role in NO_RAW_TEXT:
        body = b"".join(response.streaming_content) if response.streaming else response.content
        shown = [m for m in MARKERS if m.encode() in body]
        assert not shown, f"GET {url} showed {role} the raw text {shown}"
    return response


@pytest.mark.parametrize("key", sorted(MATRIX))
def test_it_allows_exactly_the_listed_roles(key, world, db):
    method, path = key.split(" ", 1)
    got = {role: check(world, method, path, role) for role in ROLES}
    wrong = {
        role: f"expected {MATRIX[key][role]}, got {got[role]}"
        for role in ROLES
        if got[role] != MATRIX[key][role]
    }
    assert not wrong, f"{key}: {wrong}"


@pytest.mark.parametrize("path", sorted({key.split(" ", 1)[1] for key in MATRIX} - {"/admin/*"}))
def test_it_refuses_methods_a_route_does_not_list(path, world, db):
    listed = {key.split(" ", 1)[0] for key in MATRIX if key.split(" ", 1)[1] == path}
    wrong = {}
    for method in sorted(set(MUTATIONS) - listed):
        for role in ("viewer", "approver"):
            got = check(world, method, path, role)
            if got not in (DENIED, "status 405"):
                wrong[f"{method} as {role}"] = got
    assert not wrong, f"{path} answers methods the matrix does not list: {wrong}"


# What the decision's team's engineer gets with BODIES: the act done, not a refusal of its input.
OPERATED = {
    "POST /decisions/{decision}/rollouts/new/": 302,  # to the new rollout's page
    "POST /decisions/{decision}/rollouts/{pk}/act/": 302,
    "POST /api/decisions/{id}/rollouts": 201,
    "POST /api/rollouts/{id}/pause": 200,
    "POST /api/rollouts/{id}/resume": 200,
    "POST /api/rollouts/{id}/stop": 200,
    "POST /api/rollouts/{id}/rolled-back": 200,
}


@pytest.mark.parametrize("key", sorted(OPERATED))
def test_it_lets_the_team_s_engineer_operate_a_rollout(key, world, db):
    method, path = key.split(" ", 1)
    response = respond(world, method, path, "engineer")
    assert response.status_code == OPERATED[key], response.content[:500]
    if response.status_code == 302:
        assert "/rollouts/" in response["Location"] and "/new/" not in response["Location"]
