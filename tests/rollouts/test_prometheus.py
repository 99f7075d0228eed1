"""Rollback triggers' queries against a real Prometheus scraping a drifting vLLM-like server
(tests/support/prometheus.py), plus the pure parts: the pool selector, the window, the
rendering and the registered servers (console.env.envprometheus)."""

from __future__ import annotations

import json
import math
import socket
import time

import pytest

from console.env import SettingsError, envprometheus
from console.rollouts import prometheus as prom
from console.rollouts.prometheus import (
    PrometheusError,
    instant_query,
    pool_selector_check,
    query_render,
    window_duration,
)
from tests.support.net import free_port
from tests.support.prometheus import drifting_metrics, prometheus_server, prometheus_wait

TPOT_P95 = (
    "histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{$pool}[$window])))"
)
ACCEPTANCE = (
    "sum(rate(vllm:spec_decode_num_accepted_tokens_total{$pool}[$window]))"
    " / sum(rate(vllm:spec_decode_num_draft_tokens_total{$pool}[$window]))"
)
WINDOW_MIN = 5 / 60  # five seconds: five scrapes, about 1,250 TPOT observations per pool
BASELINE = 'pool="baseline"'
CANDIDATE = 'pool="candidate"'
CANDIDATE_TPOT_S = 0.030  # the baseline keeps the default 0.020


@pytest.fixture(scope="module")
def metrics():
    with drifting_metrics(seed=11) as server:
        server.set(pool="candidate", tpot_median_s=CANDIDATE_TPOT_S)
        yield server


@pytest.fixture(scope="module")
def prometheus_url(metrics):
    with prometheus_server(targets=[metrics.target]) as url:
        yield url


def _look(url: str, template: str, pool: str) -> float | None:
    return instant_query(url=url, query=query_render(template, pool=pool, window_min=WINDOW_MIN))


def _near(value: float | None, expected: float, rel: float = 0.12) -> bool:
    return value is not None and abs(value - expected) <= rel * expected


# Prometheus


def test_it_reads_each_pools_tpot_p95_near_the_planted_one(metrics, prometheus_url):
    baseline = metrics.profile("baseline").tpot_p95_s()
    candidate = metrics.profile("candidate").tpot_p95_s()
    looks: dict[str, float | None] = {}

    def both_near() -> bool:
        looks.update(
            baseline=_look(prometheus_url, TPOT_P95, BASELINE),
            candidate=_look(prometheus_url, TPOT_P95, CANDIDATE),
        )
        return _near(looks["baseline"], baseline) and _near(looks["candidate"], candidate)

    prometheus_wait(both_near, timeout_s=20)
    assert looks["candidate"] > looks["baseline"]  # type: ignore[operator]


def test_it_sees_a_drift_planted_at_run_time_in_the_next_windows(metrics, prometheus_url):
    before = _look(prometheus_url, TPOT_P95, CANDIDATE)
    try:
        drifted = metrics.set(pool="candidate", tpot_median_s=0.060).tpot_p95_s()
        # judged once a whole window (and a scrape either side) holds only drifted samples
        settled_at = time.monotonic() + WINDOW_MIN * 60 + 2
        prometheus_wait(
            lambda: (
                time.monotonic() > settled_at and _near(_look(prometheus_url, TPOT_P95, CANDIDATE), drifted)
            ),
            timeout_s=20,
        )
        assert before is None or before < 0.8 * drifted
        assert _near(_look(prometheus_url, TPOT_P95, BASELINE), metrics.profile("baseline").tpot_p95_s())
    finally:
        metrics.set(pool="candidate", tpot_median_s=CANDIDATE_TPOT_S)


def test_it_reads_a_ratio_of_counters_and_a_selector_after_other_matchers(metrics, prometheus_url):
    metrics.set(pool="baseline", acceptance=0.7)
    prometheus_wait(lambda: _near(_look(prometheus_url, ACCEPTANCE, BASELINE), 0.7, rel=0.05), timeout_s=20)
    gauge = query_render(
        'vllm:kv_cache_usage_perc{model_name="spec-model",$pool}', pool=BASELINE, window_min=1
    )
    assert _near(instant_query(url=prometheus_url, query=gauge), 0.4, rel=0.25)


def test_it_carries_prometheus_parse_error(prometheus_url):
    with pytest.raises(PrometheusError) as caught:
        instant_query(url=prometheus_url, query="sum(rate(vllm:num_preemptions_total{pool=}[5m])")
    message = str(caught.value)
    assert "bad_data" in message and "parse error" in message
    assert prometheus_url in message
    assert len(message) < 500


def test_it_asks_to_aggregate_a_query_that_returns_two_series(prometheus_url):
    with pytest.raises(PrometheusError, match="returned 2 series: aggregate it"):
        instant_query(url=prometheus_url, query="vllm:kv_cache_usage_perc")


def test_it_answers_none_for_no_data_and_for_nan(prometheus_url):
    assert instant_query(url=prometheus_url, query='vllm:kv_cache_usage_perc{pool="nobody"}') is None
    assert instant_query(url=prometheus_url, query="0 / 0") is None
    assert instant_query(url=prometheus_url, query="vector(1) / 0") is None
    # an hour ago, before this Prometheus had any sample
    assert instant_query(url=prometheus_url, query="sum(up)", at=time.time() - 3600) is None


def test_it_reads_scalars_and_one_sample_vectors(prometheus_url):
    assert instant_query(url=prometheus_url, query="scalar(vector(2.5))") == 2.5
    assert instant_query(url=prometheus_url, query="sum(up)") == 1.0


def test_it_refuses_a_range_vector(prometheus_url):
    with pytest.raises(PrometheusError, match="gives a matrix"):
        instant_query(url=prometheus_url, query="up[5s]")


def test_it_never_shows_a_token_or_a_password(prometheus_url):
    url = prometheus_url.replace("http://", "http://operator:pa55word@")
    with pytest.raises(PrometheusError) as caught:
        instant_query(url=url, query="nonsense(", bearer_token="s3cret-token")
    assert "s3cret-token" not in str(caught.value) and "pa55word" not in str(caught.value)
    assert prometheus_url in str(caught.value)


def test_it_refuses_a_token_with_a_line_break_without_showing_it():
    with pytest.raises(PrometheusError, match="has a control or non-ASCII character") as caught:
        instant_query(url=f"http://127.0.0.1:{free_port()}", query="up", bearer_token="s3cret\nX-Evil: 1")
    assert "s3cret" not in str(caught.value)


def test_it_caps_the_answers_size(prometheus_url, monkeypatch):
    monkeypatch.setattr(prom, "MAX_RESPONSE_BYTES", 200)
    with pytest.raises(PrometheusError, match="answered more than"):
        instant_query(url=prometheus_url, query="vllm:time_per_output_token_seconds_bucket")


def test_it_says_so_quickly_when_nothing_listens():
    url = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(PrometheusError, match=f"cannot reach Prometheus at {url}"):
        instant_query(url=url, query="up")
    assert time.monotonic() - started < 2


def test_it_gives_up_after_its_timeout_when_the_server_never_answers():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)  # connections queue in the backlog, never accepted nor answered
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(PrometheusError, match="did not answer within 0.5 s"):
            instant_query(url=url, query="up", timeout_s=0.5)
        assert time.monotonic() - started < 2


def test_it_says_what_a_non_prometheus_server_answered(metrics):
    with pytest.raises(PrometheusError, match=r"answered HTTP 501 without its JSON"):
        instant_query(url=f"http://{metrics.target}", query="up")


# The pool selector, the window and the rendering


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ('pool="candidate"', 'pool="candidate"'),
        (' pool = "candidate" , zone!="eu" ', 'pool="candidate",zone!="eu"'),
        ('pod=~"web-.*",app!~"canary|shadow"', 'pod=~"web-.*",app!~"canary|shadow"'),
        (r'pool="a\"b\\c"', r'pool="a\"b\\c"'),
        (r'pool="tab\there\u00e9"', r'pool="tab\there\u00e9"'),
        ('_Pool2="ünïcode"', '_Pool2="ünïcode"'),
        ('pool=""', 'pool=""'),
    ],
)
def test_it_accepts_label_matchers(text, normalised):
    assert pool_selector_check(text) == normalised


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("   ", "is empty"),
        ('pool="a"} or vector(1) or {x="', "after a matcher"),
        ('pool="a"}[5m]', "after a matcher"),
        ('pool="a" or vector(1)', "after a matcher"),
        ('pool="a"pool="b"', "after a matcher"),
        ('pool="a";drop', "after a matcher"),
        ('pool="a",', "ends with a comma"),
        ('pool="a",,zone="b"', "not label matchers"),
        ('{pool="a"}', "not label matchers"),
        ("pool=a", "not label matchers"),
        ("pool='a'", "not label matchers"),
        ("pool=`a`", "not label matchers"),
        ('pool=="a"', "not label matchers"),
        ('pool>"a"', "not label matchers"),
        ('1pool="a"', "not label matchers"),
        ('po-ol="a"', "not label matchers"),
        (r'pool="a\q"', "not label matchers"),
        ('pool="a\x00"', "not label matchers"),
        ('pool="a', "not label matchers"),
        ('pool="a"\n', "line break"),
        ('pool="a\nb"', "line break"),
        ('__name__="up"', "reserved label"),
    ],
)
def test_it_refuses_anything_but_label_matchers(text, problem):
    with pytest.raises(ValueError, match=problem):
        pool_selector_check(text)


@pytest.mark.parametrize(
    ("minutes", "duration"),
    [
        (10, "10m"),
        (120, "120m"),
        (1.5, "90s"),
        (0.05, "3s"),
        (0.025, "1500ms"),
        (1 / 60_000, "1ms"),
        (2.0, "2m"),
    ],
)
def test_it_writes_a_window_as_a_prometheus_duration(minutes, duration):
    assert window_duration(minutes) == duration


@pytest.mark.parametrize("minutes", [0, -1, 1e-6, math.nan, math.inf, -math.inf, True, "10", None])
def test_it_refuses_a_window_that_is_not_a_positive_finite_number(minutes):
    with pytest.raises(ValueError):
        window_duration(minutes)


def test_it_renders_pool_and_window():
    assert (
        query_render(TPOT_P95, pool=' pool = "candidate" ', window_min=10)
        == 'histogram_quantile(0.95, sum by (le) (rate(vllm:time_per_output_token_seconds_bucket{pool="candidate"}[10m])))'
    )
    rendered = query_render('x{a="b",$pool}[$window] / y{$pool}[$window]', pool=BASELINE, window_min=0.5)
    assert rendered == 'x{a="b",pool="baseline"}[30s] / y{pool="baseline"}[30s]'


def test_it_renders_a_query_without_a_pool_and_refuses_unknown_placeholders():
    assert query_render("sum(up)", pool=BASELINE, window_min=1) == "sum(up)"
    with pytest.raises(ValueError, match=r"unknown placeholders \['windows'\]"):
        query_render("rate(x{$pool}[$windows])", pool=BASELINE, window_min=1)
    with pytest.raises(ValueError, match="after a matcher"):
        query_render("rate(x{$pool}[$window])", pool='pool="a"} or vector(1) or {x="', window_min=1)


# The registered servers (SPECREVIEW_PROMETHEUS)


def test_it_reads_no_servers_when_unset(monkeypatch):
    monkeypatch.delenv("SR_PROM", raising=False)
    assert envprometheus("SR_PROM") == {}


def test_it_reads_the_short_form(monkeypatch):
    monkeypatch.setenv("SR_PROM", "main=http://prometheus:9090/, eu.west-1=https://10.0.0.5:9090/prom")
    assert envprometheus("SR_PROM") == {
        "main": {"url": "http://prometheus:9090", "bearer_token_file": ""},
        "eu.west-1": {"url": "https://10.0.0.5:9090/prom", "bearer_token_file": ""},
    }


def test_it_reads_the_json_form_with_a_token_file(monkeypatch):
    value = {
        "main": "http://[::1]:9090",
        "cloud": {"url": "https://prom.example", "bearer_token_file": "/run/s/p"},
    }
    monkeypatch.setenv("SR_PROM", json.dumps(value))
    assert envprometheus("SR_PROM") == {
        "main": {"url": "http://[::1]:9090", "bearer_token_file": ""},
        "cloud": {"url": "https://prom.example", "bearer_token_file": "/run/s/p"},
    }


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("main", "is not NAME=URL"),
        ("main=http://a:9090,main=http://b:9090", "named twice"),
        ("main=ftp://a:9090", "needs an http"),
        ("main=http://", "needs an http"),
        ("main=prometheus:9090", "needs an http"),
        ("-main=http://a:9090", "is not a server name"),
        ("main=http://user:pw@a:9090", "no user, password"),
        ("main=http://a:9090/?x=1", "no user, password"),
        ('{"main": ', "is not JSON"),
        ('["http://a:9090"]', "must be a JSON object"),
        ('{"main": 9090}', "must be a URL or"),
        ('{"main": {"url": "http://a:9090", "token": "x"}}', "must be a URL or"),
        ('{"main": {"url": "http://a:9090", "bearer_token_file": "run/token"}}', "absolute path"),
        ('{"main": {"url": "http://a:9090", "bearer_token_file": 5}}', "absolute path"),
        ('{"main": {"bearer_token_file": "/run/token"}}', "needs an http"),
    ],
)
def test_it_refuses_a_bad_server_list_naming_the_variable(monkeypatch, value, problem):
    monkeypatch.setenv("SR_PROM", value)
    with pytest.raises(SettingsError, match=problem) as caught:
        envprometheus("SR_PROM")
    assert str(caught.value).startswith("SR_PROM")
