"""One way to show a number (issue 22, points 4, 5 and 7): every page of a finished synthetic
experiment (its comparison with every slice, a run, a request pair, the fitted policy, decisions
drafted to enable and to keep speculation off, one signed over a failing gate, the lists, the
archive, the forms and the Markdown export) is rendered and its visible text searched for what
no reader should meet: a Python repr, a bare float with more than four significant digits, a
negative ratio or a change below -100 %, and an internal snake_case key.

Text inside <code>, <pre>, <kbd>, <samp>, <script>, <style> and <textarea> is shown as code on
purpose (a config, a command line, a field name to type) and is not searched; neither are the
names the data itself brings (task types, traffic classes, arm labels), which the user chose."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

pytestmark = pytest.mark.django_db

CODE_TAGS = {"code", "pre", "kbd", "samp", "script", "style", "textarea", "title"}
VOID = {"br", "hr", "img", "input", "meta", "link", "source", "wbr", "col", "area", "base", "embed", "param", "track"}


class VisibleText(HTMLParser):
    """The text a reader sees, outside code-like elements, one string per text node."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.chunks: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if tag in self.stack:
            while self.stack and self.stack.pop() != tag:
                pass

    def handle_data(self, data):
        if data.strip() and not CODE_TAGS.intersection(self.stack):
            self.chunks.append(data)


def visible_text(html: str) -> str:
    parser = VisibleText()
    parser.feed(html)
    return "\n".join(parser.chunks)


REPR = re.compile(r"\{'|\['|\('|\bNone\b|\bTrue\b|\bFalse\b|\bnan\b|\binf\b|object at 0x|Decimal\(|datetime\.")
FLOAT = re.compile(r"(?<![\w.])-?\d[\d,]*\.\d+(?![\w.])")
NEGATIVE_RATIO = re.compile(r"(?<![\w.])-\d+(?:\.\d+)?\s*x\b")
BIG_LOSS = re.compile(r"(?<![\w.])-(\d+(?:\.\d+)?)\s*%")
SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/-])")


def significant_digits(number: str) -> int:
    digits = number.lstrip("-").replace(",", "").replace(".", "").lstrip("0")
    return len(digits)


def findings(text: str, allowed: set[str]) -> list[str]:
    found = [f"repr {m.group(0)!r}" for m in REPR.finditer(text)]
    found += [f"float {m.group(0)}" for m in FLOAT.finditer(text) if significant_digits(m.group(0)) > 4]
    found += [f"negative ratio {m.group(0)}" for m in NEGATIVE_RATIO.finditer(text)]
    found += [f"change {m.group(0)}" for m in BIG_LOSS.finditer(text) if float(m.group(1)) > 100]
    found += [f"key {m.group(0)}" for m in SNAKE.finditer(text) if m.group(0) not in allowed]
    return found


def context(text: str, finding: str) -> str:
    needle = finding.split(" ", 1)[1].strip("'")
    at = text.find(needle)
    return text[max(0, at - 60) : at + len(needle) + 40].replace("\n", " | ")


@pytest.fixture
def world(engineer, approver, settings):
    """A finished synthetic experiment and everything the console builds on it."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    from console.accounts.services import user_create
    from console.analysis.selectors import comparison_summary_for_experiment
    from console.analysis.services import comparison_refresh
    from console.analysis.slice_view import slice_options
    from console.decisions import services
    from console.policies.services import policy_fit
    from console.results.models import RequestResult
    from tests.support.synthetic import TASKS, experiment_synthesize

    experiment = experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x,2x", repeats=2)
    comparison_refresh(experiment_id=experiment.pk, n_boot=100)
    summary = comparison_summary_for_experiment(experiment=experiment)
    policy = policy_fit(experiment=experiment, created_by=engineer)
    candidate = experiment.arms.exclude(label="baseline").order_by("pk").first()
    enable = services.decision_create(
        experiment=experiment, author=engineer, title="Turn on n-gram", proposal="enable",
        candidate_arm=candidate, traffic_class="interactive", comparison=summary,
    )  # fmt: skip
    keep_off = services.decision_create(
        experiment=experiment, author=engineer, title="Keep it off", proposal="keep_off",
        candidate_arm=None, traffic_class="interactive", comparison=summary,
    )  # fmt: skip
    signed = services.decision_create(
        experiment=experiment, author=engineer, title="Turn on n-gram, signed", proposal="enable",
        candidate_arm=candidate, traffic_class="interactive", comparison=summary,
    )  # fmt: skip
    signed = services.decision_update(
        decision=signed,
        actor=engineer,
        changes={
            "rationale": "latency first",
            "checklist_answers": {
                "production_traces": {"answer": "yes"},
                "current_serving_path": {"answer": "yes"},
                "framework_compatibility": {"answer": "yes"},
            },
            "rollback_owner": "serving on-call",
            "rollback_verification": "p95 back within 15 min",
        },
    )
    signed = services.decision_submit(decision=signed, actor=engineer)
    second = user_create(username="sam-signer", password="pw-sam-signer-1", role="approver")
    signed = services.decision_sign(
        decision=signed, signer=second, verdict="approved", comment="ok", override_reason="accepted risk"
    )
    run = experiment.runs.filter(status="done").order_by("pk").first()
    a, b = RequestResult.objects.filter(run__experiment=experiment).order_by("pk").values_list("pk", flat=True)[:2]
    slices = [o["key"] for g in slice_options(summary) for o in g["options"]]
    assert len(slices) >= len(TASKS)
    pages = [
        "/",
        "/traces/",
        f"/traces/{experiment.trace_id}/",
        "/experiments/",
        f"/experiments/{experiment.pk}/",
        f"/experiments/{experiment.pk}/live/",
        "/experiments/new/",
        f"/analysis/experiments/{experiment.pk}/",
        *(f"/analysis/experiments/{experiment.pk}/?slice={s}" for s in slices),
        f"/analysis/runs/{run.pk}/",
        f"/analysis/results/{a}/vs/{b}/",
        "/policies/",
        f"/policies/{policy.pk}/",
        f"/policies/new/?experiment={experiment.pk}",
        f"/policies/schedule/{experiment.pk}/",
        "/decisions/",
        "/decisions/archive/",
        f"/decisions/new/?experiment={experiment.pk}",
        f"/decisions/{enable.pk}/",
        f"/decisions/{enable.pk}/edit/",
        f"/decisions/{keep_off.pk}/",
        f"/decisions/{signed.pk}/",
        "/accounts/tokens/",
    ]
    exports = [f"/decisions/{d.pk}/export.md" for d in (enable, keep_off, signed)]
    allowed = set(TASKS) | {"interactive", "batch"} | set(experiment.arms.values_list("label", flat=True))
    return pages, exports, allowed


def test_no_page_shows_a_repr_a_long_float_an_impossible_ratio_or_an_internal_key(world, approver_client):
    pages, _, allowed = world
    problems = []
    for path in pages:
        response = approver_client.get(path)
        assert response.status_code == 200, (path, response.status_code)
        text = visible_text(response.content.decode())
        problems += [f"{path}: {f}  «{context(text, f)}»" for f in dict.fromkeys(findings(text, allowed))]
    assert problems == [], "\n".join(problems)


def test_the_markdown_export_outside_its_code_shows_none_of_them_either(world, approver_client):
    _, exports, allowed = world
    problems = []
    for path in exports:
        response = approver_client.get(path)
        assert response.status_code == 200, path
        text = re.sub(r"```.*?```", "", response.content.decode(), flags=re.S)
        text = re.sub(r"`[^`\n]*`", "", text)
        problems += [f"{path}: {f}  «{context(text, f)}»" for f in dict.fromkeys(findings(text, allowed))]
    assert problems == [], "\n".join(problems)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("{'proposal': 'keep_off'}", ["repr \"{'\"", "key keep_off"]),
        ("ratio 1.40x [-0.31x, 3.1x]", ["negative ratio -0.31x"]),
        ("interval -131.4% to +210.5%", ["change -131.4%"]),
        ("0.084312 s / 0.08431 s / 12:30:56.841390", ["float 0.084312", "float 56.841390"]),
        ("weighted change +39.6% [0.44x, 0.64x] 12,345 requests, torch 2.5.1, 127.0.0.1", []),
        ("task_improvement, latency_benefit", ["key task_improvement", "key latency_benefit"]),
    ],
)
def test_the_scan_finds_what_it_looks_for(text, expected):
    assert findings(text, set()) == expected
