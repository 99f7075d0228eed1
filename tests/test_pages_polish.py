"""Pages people expect: every list paginates and sorts (hostile query strings never answer 500),
empty states say what to do next, forms keep what was typed when they refuse it, and each main
page has one h1, headings without skipped levels and a label on every input (checked by parsing
the HTML each page serves)."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

pytestmark = pytest.mark.django_db

LISTS = ["/traces/", "/experiments/", "/policies/", "/decisions/", "/decisions/archive/", "/accounts/tokens/"]
HOSTILE = [
    "sort=password",
    "sort=-uploaded_by__password",
    "sort=--name",
    "sort=%00",
    "sort=name%27%3B--",
    "sort=" + "x" * 5000,
    "page=abc",
    "page=-1",
    "page=0",
    "page=99999999999999999999999",
    "page=1.5",
    "page=1&page=2&sort=a&sort=b",
    "runs_page=zz&runs_sort=__class__",
]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


class Outline(HTMLParser):
    """Headings, form controls and labels of a page, in document order."""

    CONTROLS = {"input", "select", "textarea"}
    UNLABELLED_TYPES = {"hidden", "submit", "button", "reset", "image"}

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[int] = []
        self.controls: list[dict] = []
        self.label_for: set[str] = set()
        self._label_depth = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        elif tag == "label":
            self._label_depth += 1
            if a.get("for"):
                self.label_for.add(a["for"])
        elif tag in self.CONTROLS and (a.get("type") or "text") not in self.UNLABELLED_TYPES:
            self.controls.append({"tag": tag, "attrs": a, "in_label": self._label_depth > 0})

    def handle_endtag(self, tag):
        if tag == "label":
            self._label_depth = max(0, self._label_depth - 1)

    def unlabelled(self) -> list[str]:
        return [
            f"{c['tag']} name={c['attrs'].get('name')!r}"
            for c in self.controls
            if not (
                c["in_label"]
                or c["attrs"].get("id") in self.label_for
                or c["attrs"].get("aria-label")
                or c["attrs"].get("aria-labelledby")
            )
        ]


def outline(html: str) -> Outline:
    parser = Outline()
    parser.feed(html)
    return parser


def _trace_with_requests(name: str = "t"):
    from tests.experiments.factories import trace_make

    return trace_make(name=name, prompts=["hello", "world", "again"], tasks=["chat", "code", "chat"])


@pytest.fixture
def story(engineer, approver):
    """A synthetic finished experiment with its comparison, a fitted policy and a signed decision."""
    from console.analysis.services import comparison_refresh
    from tests.decisions.conftest import signed_make
    from tests.support.synthetic import experiment_synthesize

    experiment = experiment_synthesize(n_requests=40, ks=(2,), loads="1x", repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    decision = signed_make(
        experiment=experiment,
        author=engineer,
        signer=approver,
        proposal="keep_off",
        # a keep-off decision is judged as that choice; whatever its gate says, signing it over
        # a gate that does not pass takes a reason
        override_reason="kept off while the policy is reviewed",
    )
    return {"experiment": experiment, "decision": decision}


# --- pagination and sorting ------------------------------------------------------------------


def test_it_paginates_the_trace_list_and_sorts_it_by_a_whitelisted_column(engineer_client):
    from console.traces.models import Trace

    for i in range(30):
        Trace.objects.create(name=f"trace-{i:02d}", sha256=f"{i:064x}", source_format="native", request_count=i)
    first = engineer_client.get("/traces/?sort=name").content.decode()
    names = re.findall(r">(trace-\d\d)</a>", first)
    assert names == [f"trace-{i:02d}" for i in range(25)]
    assert "26–30 of 30" not in first and "1–25 of 30" in first
    second = engineer_client.get("/traces/?sort=name&page=2").content.decode()
    assert re.findall(r">(trace-\d\d)</a>", second) == [f"trace-{i:02d}" for i in range(25, 30)]
    # The pager keeps the sort; the header links reverse it.
    assert 'href="?sort=name&amp;page=2"' in first
    assert 'href="?sort=-name"' in first and 'aria-sort="ascending"' in first
    descending = engineer_client.get("/traces/?sort=-requests").content.decode()
    assert re.findall(r">(trace-\d\d)</a>", descending)[:3] == ["trace-29", "trace-28", "trace-27"]


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize("query", HOSTILE)
def test_it_answers_hostile_sort_and_page_values_with_a_page_never_a_500(engineer_client, path, query):
    response = engineer_client.get(f"{path}?{query}")
    assert response.status_code == 200, (path, query, response.status_code)


def test_it_falls_back_to_the_default_order_for_an_unknown_sort_key_and_clamps_pages(engineer_client):
    from console.traces.models import Trace

    for i in range(27):
        Trace.objects.create(name=f"tr-{i:02d}", sha256=f"{i:064x}", source_format="native", request_count=1)
    default = re.findall(r">(tr-\d\d)</a>", engineer_client.get("/traces/").content.decode())
    hostile = re.findall(r">(tr-\d\d)</a>", engineer_client.get("/traces/?sort=uploaded_by__password").content.decode())
    assert hostile == default and default[0] == "tr-26"  # newest first
    last = re.findall(r">(tr-\d\d)</a>", engineer_client.get("/traces/?page=999").content.decode())
    assert last == ["tr-01", "tr-00"]
    first = re.findall(r">(tr-\d\d)</a>", engineer_client.get("/traces/?page=abc").content.decode())
    assert first == default


def test_it_paginates_and_sorts_the_runs_on_an_experiment_page(engineer_client):
    from console.experiments.models import Run
    from tests.support.synthetic import experiment_synthesize

    exp = experiment_synthesize(n_requests=5, ks=(1, 2, 3), loads="1x,2x,4x", repeats=5)
    total = Run.objects.filter(experiment=exp).count()
    assert total > 50
    page1 = engineer_client.get(f"/experiments/{exp.pk}/").content.decode()
    rows = re.findall(r'<tr><td class="num">(\d+)</td>', page1)
    assert [int(r) for r in rows] == list(range(50))
    assert f"1–50 of {total}" in page1
    page2 = engineer_client.get(f"/experiments/{exp.pk}/?runs_page=2").content.decode()
    assert [int(r) for r in re.findall(r'<tr><td class="num">(\d+)</td>', page2)] == list(range(50, total))
    desc = engineer_client.get(f"/experiments/{exp.pk}/?runs_sort=-order").content.decode()
    assert int(re.findall(r'<tr><td class="num">(\d+)</td>', desc)[0]) == total - 1
    # The in-place refresh keeps the page the user is on.
    assert f'hx-get="/experiments/{exp.pk}/live/?runs_page=2"' in page2 or "hx-get" not in page2
    live = engineer_client.get(f"/experiments/{exp.pk}/live/?runs_page=2").content.decode()
    assert [int(r) for r in re.findall(r'<tr><td class="num">(\d+)</td>', live)] == list(range(50, total))


def test_it_paginates_api_tokens(engineer_client, engineer):
    from console.accounts.services import api_token_create

    for i in range(26):
        api_token_create(user=engineer, name=f"tok-{i:02d}")
    page = engineer_client.get("/accounts/tokens/?sort=name").content.decode()
    assert "tok-00" in page and "tok-24" in page and "tok-25" not in page
    assert "tok-25" in engineer_client.get("/accounts/tokens/?sort=name&page=2").content.decode()


# --- empty states ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path,next_step",
    [
        ("/traces/", 'href="/traces/upload/"'),
        ("/experiments/", 'href="/experiments/new/"'),
        ("/policies/", 'href="/policies/new/"'),
        ("/decisions/", 'href="/experiments/"'),
        ("/decisions/archive/", 'href="/decisions/"'),
        ("/accounts/tokens/", "Authorization: Bearer"),
    ],
)
def test_it_says_what_to_do_next_on_an_empty_list(engineer_client, path, next_step):
    html = engineer_client.get(path).content.decode()
    empty = re.search(r'class="muted empty">(.*?)</(td|li)>', html, re.S)
    assert empty, f"{path}: no empty state"
    assert next_step in empty.group(1), empty.group(1)


def test_it_gives_a_viewer_an_empty_state_without_links_it_cannot_use(viewer_client):
    html = viewer_client.get("/experiments/").content.decode()
    assert "make demo" in html and 'href="/experiments/new/"' not in html


# --- forms keep their input --------------------------------------------------------------------


def test_the_new_experiment_form_keeps_every_typed_value_on_error(engineer_client):
    trace = _trace_with_requests()
    data = {
        "name": "kept <name>",
        "trace": trace.pk,
        "split": "train",
        "engine": "hf",
        "target_model": "smollm2-135m",
        "candidates": '[{"speculative_config": {"method": "ngram"',  # broken JSON
        "load_levels": "1x,3x",
        "output_limit": "12",
        "sampling": "greedy",
        "repeats": "2",
        "warmup": "0",
        "cost_per_hour_usd": "3.5",
    }
    response = engineer_client.post("/experiments/new/", data)
    html = response.content.decode()
    assert response.status_code in (200, 400)
    assert 'value="kept &lt;name&gt;"' in html
    assert "[{&quot;speculative_config&quot;: {&quot;method&quot;: &quot;ngram&quot;" in html
    assert 'value="1x,3x"' in html and 'value="12"' in html and 'value="3.5"' in html
    assert re.search(r'<option value="train" selected>', html)
    assert re.search(rf'<option value="{trace.pk}" selected>', html)


def test_the_upload_form_keeps_its_fields_when_the_file_is_refused(engineer_client):
    from django.core.files.uploadedfile import SimpleUploadedFile

    bad = SimpleUploadedFile("bad.jsonl", b'{"id": "a", "arrival_s": "soon"}\n')
    response = engineer_client.post(
        "/traces/upload/", {"file": bad, "name": "my kept name", "holdout_fraction": "0.4", "seed": "7"}
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert 'value="my kept name"' in html and 'value="0.4"' in html and 'value="7"' in html


def test_the_policy_form_keeps_its_input_on_error(engineer_client, story):
    experiment = story["experiment"]
    response = engineer_client.post(
        "/policies/new/", {"experiment": experiment.pk, "min_support": "1", "ci": "0.9", "metric": "e2e_s"}
    )
    html = response.content.decode()
    assert response.status_code in (200, 400)
    assert 'value="1"' in html and 'value="0.9"' in html
    assert re.search(r'<option value="e2e_s" selected>', html)


def test_the_decision_forms_keep_their_input_on_error(engineer_client, approver_client, engineer, story):
    from console.decisions import services
    from tests.decisions.conftest import draft_complete

    experiment = story["experiment"]
    response = engineer_client.post(
        "/decisions/new/", {"experiment": experiment.pk, "title": "kept title", "proposal": "nonsense"}
    )
    assert response.status_code in (200, 400)
    assert 'value="kept title"' in response.content.decode()

    draft = services.decision_create(
        experiment=experiment,
        author=engineer,
        title="d",
        proposal="keep_off",
        candidate_arm=None,
        traffic_class="interactive",
        comparison=None,
    )
    from console.decisions.forms import DecisionEditForm

    data = {k: ("" if v is None else v) for k, v in DecisionEditForm.initial_for(draft).items()}
    data |= {"rollback_triggers": "not | a | trigger", "rollback_steps": "my typed steps"}
    response = engineer_client.post(f"/decisions/{draft.pk}/edit/", data)
    html = response.content.decode()
    assert response.status_code in (200, 400)
    assert "not | a | trigger" in html and "my typed steps" in html

    # The sign-off form: a missing comment keeps the verdict and the typed override reason.
    draft = draft_complete(draft, actor=engineer)
    services.decision_submit(decision=draft, actor=engineer)
    response = approver_client.post(
        f"/decisions/{draft.pk}/sign/", {"verdict": "rejected", "comment": "", "override_reason": "kept reason"}
    )
    html = response.content.decode()
    assert response.status_code == 400
    assert "kept reason" in html and re.search(r'<option value="rejected" selected>', html)


# --- headings and labels -------------------------------------------------------------------------


def test_every_main_page_has_one_h1_ordered_headings_and_labelled_inputs(engineer_client, approver_client, story):
    from console.policies.models import SlicePolicy

    experiment, decision = story["experiment"], story["decision"]
    run = experiment.runs.filter(status="done").first()
    pages = [
        "/",
        "/traces/",
        "/traces/upload/",
        f"/traces/{experiment.trace_id}/",
        "/experiments/",
        "/experiments/new/",
        f"/experiments/{experiment.pk}/",
        f"/analysis/experiments/{experiment.pk}/",
        f"/analysis/runs/{run.pk}/",
        "/policies/",
        f"/policies/new/?experiment={experiment.pk}",
        "/decisions/",
        f"/decisions/new/?experiment={experiment.pk}",
        f"/decisions/{decision.pk}/",
        "/decisions/archive/",
        "/accounts/tokens/",
    ]
    policy = SlicePolicy.objects.filter(experiment=experiment).first()
    if policy:
        pages.append(f"/policies/{policy.pk}/")
    problems = []
    for path in pages:
        response = engineer_client.get(path)
        assert response.status_code == 200, path
        page = outline(response.content.decode())
        if page.headings.count(1) != 1 or page.headings[0] != 1:
            problems.append(f"{path}: headings start {page.headings[:3]}, h1 count {page.headings.count(1)}")
        for before, after in zip(page.headings, page.headings[1:], strict=False):
            if after > before + 1:
                problems.append(f"{path}: h{before} then h{after}")
                break
        if page.unlabelled():
            problems.append(f"{path}: unlabelled {page.unlabelled()}")
    assert problems == []


def test_the_home_page_answers_its_question_for_each_experiment(viewer_client, story):
    """Beside each recent experiment, the answer recorded for it: what its decision proposes, its
    state, its gate, and whether it was approved over the gate (issue 22, point 2)."""
    from tests.support.synthetic import experiment_synthesize

    undecided = experiment_synthesize(n_requests=10, ks=(2,), loads="1x", repeats=1, name="undecided")
    html = viewer_client.get("/").content.decode()
    answers = html[html.index('id="answers"') :]
    answers = answers[: answers.index("</section>")]
    decision = story["decision"]
    mine = next(li for li in answers.split("<li>") if f"/experiments/{story['experiment'].pk}/" in li)
    assert f"Keep off:\n        <a href=\"/decisions/{decision.pk}/\">decision #{decision.pk}</a> approved" in mine
    assert "approved over the gate" in mine
    other = next(li for li in answers.split("<li>") if f"/experiments/{undecided.pk}/" in li)
    assert "No decision yet" in other
