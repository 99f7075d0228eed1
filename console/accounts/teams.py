"""Teams: the one access layer every read and every act on a team's objects goes through.

A trace belongs to a team; everything made from it (experiments, arms, runs, results,
comparisons, policies, decisions, their audit events and archive records) belongs to the trace's
team. A user sees those objects only as a member of that team and acts on them with the role of
that membership (viewer, engineer, approver: ``console.accounts.roles``). An API token acts in the
one team it names, with its user's role there.

Selectors and views never filter by hand: :func:`visible` narrows a queryset of any owned model
to the user's teams (the path from the model to its team is written once, in :data:`TEAM_PATH`;
a model missing there raises instead of showing everything), :func:`visible_get` answers the
object or a 404 (another team's object is not found, never forbidden: its existence is not
told), :func:`require` a 403 for a member whose role lacks the capability there, and
:func:`raw_text_allowed` whether the user reads the team's prompts and outputs.

The installation's operators (Django staff) manage teams and memberships in the admin and with
``manage.py team``; being staff grants no access to any team's objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
from django.forms import ValidationError
from django.http import Http404

from console.accounts import roles
from console.accounts.models import Membership, Team

# Model label -> the lookup from that model to its owning team. Every owned model is here.
TEAM_PATH: dict[str, str] = {
    "traces.Trace": "team",
    "traces.TraceRequest": "trace__team",
    "experiments.Experiment": "trace__team",
    "experiments.Arm": "experiment__trace__team",
    "experiments.Run": "experiment__trace__team",
    "results.RequestResult": "run__experiment__trace__team",
    "analysis.ComparisonCache": "experiment__trace__team",
    "policies.SlicePolicy": "experiment__trace__team",
    "decisions.Decision": "experiment__trace__team",
    "decisions.AuditEvent": "decision__experiment__trace__team",
    "decisions.ArchiveRecord": "decision__experiment__trace__team",
    "rollouts.Rollout": "decision__experiment__trace__team",
    "rollouts.Look": "rollout__decision__experiment__trace__team",
    "rollouts.RolloutEvent": "rollout__decision__experiment__trace__team",
    "accounts.Team": "",
}

_CACHE = "_specreview_memberships"


def team_default() -> Team:
    """The installation's default team (``SPECREVIEW_DEFAULT_TEAM``), made on first use: where
    objects made by commands without a team, and users made without one, belong."""
    team, _ = Team.objects.get_or_create(name=settings.SPECREVIEW_DEFAULT_TEAM)
    return team


def memberships_forget(user: Any) -> None:
    """Drop the memberships cached on ``user`` (after they change)."""
    if user is not None and hasattr(user, _CACHE):
        delattr(user, _CACHE)


def memberships(user: Any) -> dict[int, Membership]:
    """The user's memberships by team id, narrowed to the token's team on an API call made with a
    token (``api_token_team_id``, set by the login middleware). Cached on the user object, which
    lives for one request."""
    if user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", True):
        return {}
    cached = getattr(user, _CACHE, None)
    if cached is None:
        rows = Membership.objects.filter(user_id=user.pk).select_related("team")
        cached = {m.team_id: m for m in rows}
        setattr(user, _CACHE, cached)
    if hasattr(user, "api_token_team_id"):
        token_team = user.api_token_team_id
        return {token_team: cached[token_team]} if token_team in cached else {}
    return cached


def membership_permissions(membership: Membership) -> set[str]:
    """What a membership may do: its role's permissions, with raw text as the membership says."""
    perms = set(roles.ROLE_PERMISSIONS.get(membership.role, ()))
    if membership.raw_text is True:
        perms.add(roles.READ_RAW_TEXT)
    elif membership.raw_text is False:
        perms.discard(roles.READ_RAW_TEXT)
    return perms


def team_ids(user: Any, *, capability: str | None = None) -> list[int]:
    """Ids of the teams the user belongs to (with ``capability`` there, when given)."""
    return [
        team_id
        for team_id, m in memberships(user).items()
        if capability is None or capability in membership_permissions(m)
    ]


def role_in(user: Any, team_id: int | None) -> str | None:
    """The user's role in the team, None for a non-member."""
    m = memberships(user).get(team_id) if team_id is not None else None
    return m.role if m is not None else None


def can(user: Any, capability: str, *, team_id: int | None) -> bool:
    """Whether the user holds ``capability`` in the team."""
    m = memberships(user).get(team_id) if team_id is not None else None
    return m is not None and capability in membership_permissions(m)


def require(user: Any, capability: str, *, team_id: int | None, what: str) -> None:
    """PermissionDenied (a 403) unless the user holds ``capability`` in the team; call it after
    :func:`visible_get`, so that a non-member got a 404 first."""
    if not can(user, capability, team_id=team_id):
        raise PermissionDenied(f"your role in this team cannot {what}")


def raw_text_allowed(user: Any, *, team_id: int | None) -> bool:
    """Whether the user may read the team's raw text: prompts, chat messages, tool definitions and
    outputs, retrieved payloads and references (request metadata) and model outputs. Engineers
    and approvers may, viewers not, unless the membership says otherwise (``Membership.raw_text``)."""
    return can(user, roles.READ_RAW_TEXT, team_id=team_id)


def team_path(model: type[Model]) -> str:
    label = model._meta.label
    if label not in TEAM_PATH:
        raise LookupError(f"{label} has no owning team in console.accounts.teams.TEAM_PATH")
    return TEAM_PATH[label]


def visible(queryset: QuerySet, user: Any) -> QuerySet:
    """``queryset`` narrowed to the objects of the user's teams (none for a non-member)."""
    path = team_path(queryset.model)
    return queryset.filter(**{f"{path}__in" if path else "pk__in": team_ids(user)})


def visible_get(queryset: QuerySet | type[Model], user: Any, *, what: str = "", **lookup: Any) -> Any:
    """The one object of the user's teams matching ``lookup``, or Http404 (also for another
    team's object: the answer does not tell it exists)."""
    qs = queryset if isinstance(queryset, QuerySet) else queryset._default_manager.all()
    row = visible(qs, user).filter(**lookup).first()
    if row is None:
        raise Http404(f"no {what or qs.model._meta.verbose_name} {lookup.get('pk', '')}".strip())
    return row


def team_id_of(obj: Model) -> int | None:
    """The id of the team that owns ``obj`` (walks :data:`TEAM_PATH`)."""
    path = team_path(type(obj))
    if not path:
        return obj.pk
    *hops, last = path.split("__")
    for hop in hops:
        obj = getattr(obj, hop)
        if obj is None:
            return None
    return getattr(obj, f"{last}_id")


def teams_where(user: Any, capability: str | None) -> QuerySet[Team]:
    """The teams where the user holds ``capability`` (any of their teams for None): the choices of
    a create form."""
    return Team.objects.filter(pk__in=team_ids(user, capability=capability)).order_by("name")


def team_for_new(user: Any, capability: str | None, *, team: Team | int | str | None = None) -> Team:
    """The team a new object (or token) of the user's goes to: ``team`` (a Team, an id or a name)
    when given and the user holds ``capability`` there (None: is a member), else the one such team.
    ValueError naming the choice otherwise (a form or API turns it into a 400 on ``team``)."""
    allowed = list(teams_where(user, capability))
    if team is not None and team != "":
        key = team.pk if isinstance(team, Team) else team
        for t in allowed:
            if key in (t.pk, t.name) or str(key) in (str(t.pk), t.name):
                return t
        raise ValueError(f"you cannot do this in team {str(key)[:64]!r}: choose one of {_names(allowed)}")
    if len(allowed) == 1:
        return allowed[0]
    if not allowed:
        raise ValueError("you are not a member of any team with this permission: ask an operator")
    raise ValueError(f"you belong to several teams: name one of {_names(allowed)}")


def team_or_only_one(chosen: Team | None, field: Any, *, what: str) -> Team:
    """A form's team: the one chosen, else the user's only choice (``field.queryset``); a form error
    otherwise (``what`` ends "choose the team ..."): a user of one team never has to pick it."""
    if chosen is not None:
        return chosen
    choices = list(field.queryset)
    if len(choices) == 1:
        return choices[0]
    raise ValidationError(f"choose the team {what}" if choices else "you are not a member of any team yet")


def _names(teams: Iterable[Team]) -> str:
    return ", ".join(t.name for t in teams) or "(none)"


def capabilities_in(user: Any, team_id: int | None) -> dict[str, bool]:
    """The page flags (``can_run_experiment``...) for one team's object: what buttons to offer. A
    page about a team's object puts these in its context, over the context processor's
    "anywhere" flags (console/accounts/context.py)."""
    return {
        "can_upload_trace": can(user, roles.UPLOAD_TRACE, team_id=team_id),
        "can_run_experiment": can(user, roles.RUN_EXPERIMENT, team_id=team_id),
        "can_draft_decision": can(user, roles.DRAFT_DECISION, team_id=team_id),
        "can_sign_decision": can(user, roles.SIGN_DECISION, team_id=team_id),
    }


def roles_text(user: Any) -> str | None:
    """The user's roles for the page header: "engineer" with one team, "engineer in a, viewer in b"
    with several, None with none."""
    ms = sorted(memberships(user).values(), key=lambda m: m.team.name)
    if not ms:
        return None
    if len(ms) == 1:
        return ms[0].role
    return ", ".join(f"{m.role} in {m.team.name}" for m in ms)
