"""Teams (issue 24): the command and the admin that make them, tokens acting in one team, uploads
owned, deduplicated and paired within their team, and each team's redaction and retention."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from console.accounts.models import ApiToken, Membership, Team
from console.accounts.scopes import SCOPES
from console.accounts.services import api_token_create, membership_set, team_resolve, user_create
from console.accounts.teams import team_default
from console.traces.models import Trace
from console.traces.services import trace_import

pytestmark = pytest.mark.django_db
PASSWORD = "pw-teams-long-1"


def _jsonl(*prompts: str) -> bytes:
    rows = [{"id": f"r{i}", "arrival_s": i, "prompt": p, "max_tokens": 8} for i, p in enumerate(prompts)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _file(*prompts: str) -> io.BytesIO:
    return io.BytesIO(_jsonl(*prompts))


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_command_creates_teams_and_memberships(capsys, tmp_path):
    user_create(username="tina", password=PASSWORD, role="viewer", team="ops")
    patterns = tmp_path / "p.txt"
    patterns.write_text("EMPLOYEE=EMP-\\d{6}\n")
    call_command(
        "team", "create", "payments", "--redact", "--patterns-file", str(patterns), "--retention-days", "30"
    )
    call_command("team", "add", "payments", "tina", "--role", "approver", "--raw-text", "no")
    team = Team.objects.get(name="payments")
    assert (
        team.redact_at_import and "EMPLOYEE" in team.redaction_patterns and team.raw_text_retention_days == 30
    )
    m = Membership.objects.get(team=team, user__username="tina")
    assert (m.role, m.raw_text) == ("approver", False)
    call_command("team", "list", "payments")
    assert "tina: approver (raw text off)" in capsys.readouterr().out
    call_command("team", "remove", "payments", "tina")
    assert not Membership.objects.filter(team=team).exists()
    assert Membership.objects.filter(team__name="ops", user__username="tina").exists()  # the other stays


@pytest.mark.parametrize(
    "argv,message",
    [
        (["create", "Bad Name"], "lower-case letters"),
        (["create", "x", "--retention-days", "0"], "at least 1"),
        (["add", "nope", "tina", "--role", "viewer"], "no team 'nope'"),
        (["add", "default", "nobody", "--role", "viewer"], "no user 'nobody'"),
        (["remove", "default", "tina"], "not a member"),
    ],
)
def test_the_command_refuses_bad_input_naming_it(argv, message):
    team_default()
    user_create(username="tina", password=PASSWORD, role="viewer", team="ops")
    with pytest.raises(CommandError, match=message):
        call_command("team", *argv)


def test_the_command_refuses_a_bad_redaction_pattern(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("EMPLOYEE=(unclosed\n")
    with pytest.raises(CommandError, match="--patterns-file"):
        call_command("team", "create", "payments", "--patterns-file", str(bad))
    assert not Team.objects.filter(name="payments").exists()


def test_create_user_names_the_team_and_the_token_acts_in_it(capsys):
    call_command("create_user", "cli", role="engineer", team="search", password="longenough1", token=True)
    out = capsys.readouterr().out
    assert "in team search" in out and "API token for team search" in out
    assert ApiToken.objects.get(user__username="cli").team.name == "search"


def test_the_admin_manages_teams_for_staff(client):
    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser("root", "root@example.org", PASSWORD)
    client.force_login(admin)
    assert client.get("/admin/accounts/team/").status_code == 200
    response = client.post(
        "/admin/accounts/team/add/",
        {
            "name": "payments",
            "redaction_patterns": "EMPLOYEE=(unclosed",
            "memberships-TOTAL_FORMS": "0",
            "memberships-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200 and not Team.objects.filter(name="payments").exists()  # the pattern
    response = client.post(
        "/admin/accounts/team/add/",
        {
            "name": "payments",
            "redaction_patterns": "EMPLOYEE=EMP-\\d{6}",
            "memberships-TOTAL_FORMS": "1",
            "memberships-INITIAL_FORMS": "0",
            "memberships-0-user": str(admin.pk),
            "memberships-0-role": "viewer",
        },
    )
    assert response.status_code == 302
    assert Membership.objects.get(team__name="payments").user == admin


def test_a_token_acts_in_its_one_team_only():
    """A member of two teams: the token of one sees nothing of the other, with its role there."""
    home, other = team_default(), team_resolve("other", create=True)
    user = user_create(username="two-teams", password=PASSWORD, role="viewer", team=home)
    membership_set(user=user, team=other, role="engineer")
    mine = trace_import(file=_file("a"), name="home trace", uploaded_by=None, team=home).trace
    theirs = trace_import(file=_file("b"), name="other trace", uploaded_by=None, team=other).trace
    with pytest.raises(Exception, match="name the team the token acts in"):
        api_token_create(user=user, scopes=SCOPES)
    client = Client()
    key = api_token_create(user=user, scopes=SCOPES, team="other")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    listed = {t["id"] for t in client.get("/api/traces", **auth).json()["traces"]}
    assert listed == {theirs.pk}
    assert client.get(f"/api/traces/{mine.pk}", **auth).status_code == 404
    # its role is the one in its team: an engineer there may upload, and the trace is that team's
    upload = SimpleUploadedFile("t.jsonl", _jsonl("c"))
    response = client.post("/api/traces", {"file": upload}, **auth)
    assert response.status_code == 201 and response.json()["trace"]["team"] == "other"
    # with the home team's token the same user is a viewer there: no upload
    key = api_token_create(user=user, scopes=SCOPES, team=home)
    upload = SimpleUploadedFile("t.jsonl", _jsonl("d"))
    assert client.post("/api/traces", {"file": upload}, HTTP_AUTHORIZATION=f"Bearer {key}").status_code == 403


def test_an_upload_belongs_to_the_team_chosen_and_dedup_stays_within_it():
    home, other = team_default(), team_resolve("other", create=True)
    user = user_create(username="up", password=PASSWORD, role="engineer", team=home)
    membership_set(user=user, team=other, role="engineer")
    client = _client(user)
    form = {"holdout_fraction": "0.3", "seed": "0", "default_max_tokens": "64"}
    missing = client.post("/traces/upload/", {"file": SimpleUploadedFile("t.jsonl", _jsonl("x")), **form})
    assert missing.status_code == 400 and "team" in missing.context["form"].errors  # two teams: name one
    for team in (home, other):
        upload = SimpleUploadedFile("t.jsonl", _jsonl("x"))
        assert client.post("/traces/upload/", {"file": upload, "team": team.pk, **form}).status_code == 302
    assert sorted(Trace.objects.values_list("team__name", flat=True)) == ["default", "other"]
    # the other team's copy is no duplicate of this team's: nobody is told another team has the file
    outsider = user_create(username="outsider", password=PASSWORD, role="engineer", team="third")
    result = trace_import(
        file=_file("x"), name="again", uploaded_by=outsider, team=Team.objects.get(name="third")
    )
    assert result.created


def test_pairing_and_borrowing_see_only_the_importing_team_s_traces():
    from console.traces.errors import TraceImportError

    other = team_resolve("other", create=True)
    theirs = trace_import(file=_file("secret prompt"), name="theirs", uploaded_by=None, team=other).trace
    timing = io.BytesIO(b'{"timestamp": 0, "input_length": 10, "output_length": 5}\n')
    with pytest.raises(TraceImportError, match=f"no trace {theirs.pk}"):
        trace_import(file=timing, name="t", filename="t.jsonl", uploaded_by=None, pair_with=str(theirs.pk))
    with pytest.raises(TraceImportError, match=f"no trace {theirs.pk}"):
        trace_import(file=_file("a"), name="t", uploaded_by=None, arrival=f"borrow:{theirs.pk}")


def test_a_team_that_redacts_redacts_every_upload_with_its_own_patterns():
    team = team_resolve("payments", create=True)
    team.redact_at_import, team.redaction_patterns = True, "EMPLOYEE=EMP-\\d{6}"
    team.save()
    prompt = "mail ada@example.org about EMP-123456"
    trace = trace_import(file=_file(prompt), name="t", uploaded_by=None, team=team, redact=False).trace
    stored = trace.requests.get().prompt
    assert "ada@example.org" not in stored and "EMP-123456" not in stored
    assert "[EMAIL_1]" in stored and "[EMPLOYEE_1]" in stored
    assert trace.metadata["redaction"]["patterns"] == ["EMPLOYEE"]
    plain = trace_import(file=_file(prompt), name="t", uploaded_by=None, team=team_default()).trace
    assert plain.requests.get().prompt == prompt  # the default team does not redact


def test_a_team_s_retention_period_overrides_the_installation_s(settings):
    from console.analysis.retention import retention_days_for, traces_purge_due

    settings.SPECREVIEW_RAW_TEXT_RETENTION_DAYS = 90
    team = team_resolve("short", create=True)
    team.raw_text_retention_days = 7
    team.save()
    short = trace_import(file=_file("a"), name="short", uploaded_by=None, team=team).trace
    long = trace_import(file=_file("b"), name="long", uploaded_by=None).trace
    assert (retention_days_for(trace=short), retention_days_for(trace=long)) == (7, 90)
    due = traces_purge_due(now=timezone.now() + dt.timedelta(days=8))
    assert [(t.pk, days) for t, days in due] == [(short.pk, 7)]


def test_a_member_of_no_team_sees_empty_lists_and_a_notice():
    from django.contrib.auth import get_user_model

    trace_import(file=_file("a"), name="visible-to-members-only", uploaded_by=None)
    loner = get_user_model().objects.create_user("loner", password=PASSWORD)
    client = _client(loner)
    home = client.get("/").content.decode()
    assert 'id="no-team"' in home and "visible-to-members-only" not in home
    assert "visible-to-members-only" not in client.get("/traces/").content.decode()
    assert client.get("/traces/upload/").status_code == 403
