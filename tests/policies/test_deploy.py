"""Deploying a slice policy: vllm serve lines per pool and the LiteLLM router config, checked by
LiteLLM's own Router (it loads the exported YAML and routes every slice tag)."""

from __future__ import annotations

import asyncio
import json
import os
import shlex

import pytest
import yaml

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network fetch on import

import litellm  # noqa: E402

from console.policies import deploy  # noqa: E402
from console.policies import router as policy_router
from console.policies.selectors import policy_deployment  # noqa: E402
from console.policies.services import policy_fit  # noqa: E402
from tests.policies.builders import ARM_CONFIGS, features_frame  # noqa: E402
from tests.support.synthetic import experiment_synthesize  # noqa: E402

A = deploy.ArmServing
K2, K4 = ARM_CONFIGS["k2"], ARM_CONFIGS["k4"]
# The docs' example: batch code gets k=4; JSON is carved out; everything else k=2; default off.
DOC = {
    "rules": [
        {
            "when": {"model": "m", "task": "code", "traffic_class": "batch"},
            "arm": "k4",
            "speculative_config": K4,
        },
        {"when": {"model": "m", "task": "json"}, "arm": None, "speculative_config": None},
        {"when": {"model": "m"}, "arm": "k2", "speculative_config": K2},
        {"when": {}, "arm": None, "speculative_config": None},
    ]
}


def build(document=DOC, *, model="m", baseline=None, candidates=None):
    return deploy.deployment_build(
        policy_id=7,
        rules_sha256="0" * 64,
        document=document,
        model=model,
        baseline=baseline or A("base", "vllm", model),
        candidates=candidates or {"k2": A("k2", "vllm", model, {}, K2), "k4": A("k4", "vllm", model, {}, K4)},
    )


def load_router(text: str) -> tuple[dict, litellm.Router]:
    """What the LiteLLM proxy does with its config file: model_list and router_settings go to Router."""
    config = yaml.safe_load(text)
    return config, litellm.Router(model_list=config["model_list"], **config["router_settings"])


def routed_pool(router: litellm.Router, model: str, tags: list[str] | None) -> str:
    kwargs = {"metadata": {"tags": tags} if tags is not None else {}}
    messages = [{"role": "user", "content": "hi"}]
    chosen = asyncio.run(router.select(model, kwargs, messages=messages))
    return chosen["model_info"]["specreview_pool"]


def test_it_makes_one_pool_per_arm_the_rules_route_to_and_the_baseline():
    d = build()
    assert [(p.name, p.arm.label, p.rules) for p in d.pools] == [
        ("baseline", "base", [2]),
        ("spec-1", "k4", [1]),
        ("spec-2", "k2", [3]),
    ]
    # The all-other slice (a task no rule names, any class) falls to rule 3: k=2 is the default.
    assert [p.name for p in d.pools if p.is_default] == ["spec-2"]
    assert {r["tag"]: r["pool"] for r in d.table} == {
        "specreview-slice:task=code&traffic_class=batch": "spec-1",
        "specreview-slice:task=code&traffic_class=*": "spec-2",
        "specreview-slice:task=json&traffic_class=batch": "baseline",
        "specreview-slice:task=json&traffic_class=*": "baseline",
        "specreview-slice:task=*&traffic_class=batch": "spec-2",
        "specreview-slice:task=*&traffic_class=*": "spec-2",
    }


def test_it_leaves_out_a_pool_no_slice_reaches():
    doc = {"rules": [{"when": {"model": "m"}, "arm": "k2", "speculative_config": K2}, DOC["rules"][-1]]}
    d = build(doc)
    assert [p.name for p in d.pools] == ["spec-1"] and d.pools[0].is_default
    assert d.table == [{"when": {}, "tag": "specreview-slice:", "rule": 1, "pool": "spec-1"}]


def test_it_writes_vllm_serve_lines_with_each_arms_speculative_config():
    d = build(
        baseline=A(
            "base",
            "vllm",
            "m",
            {"device": "cuda", "enforce_eager": True, "enable_prefix_caching": False, "max_model_len": 2048},
        ),
        candidates={
            "k2": A("k2", "vllm", "m", {"max_model_len": 2048}, K2),
            "k4": A("k4", "openai", "m", {"server": "http://x", "check_server": False}, K4),
        },
    )
    lines = {e["pool"]: e for e in deploy.serve_lines(d)}
    base = shlex.split(lines["baseline"]["command"])
    assert base == [
        "vllm",
        "serve",
        "m",
        "--served-model-name=m",
        "--port=8100",
        "--no-enable-prefix-caching",
        "--enforce-eager",
        "--max-model-len=2048",
    ]
    assert "--speculative-config" not in base
    for pool, config in (("spec-1", K4), ("spec-2", K2)):
        argv = shlex.split(lines[pool]["command"])
        assert argv[:3] == ["vllm", "serve", "m"]
        assert json.loads(argv[argv.index("--speculative-config") + 1]) == config
    # An OpenAI-server arm's engine args are not vLLM arguments: they stay out.
    assert not any("server" in a for a in shlex.split(lines["spec-1"]["command"]))
    script = deploy.serve_script(d)
    commands = [line for line in script.splitlines() if not line.startswith("#")]
    assert commands == [e["command"] for e in deploy.serve_lines(d)]


HOSTILE = 'm\'; rm -rf / #\n$(reboot) `id` "x"'


def test_it_quotes_user_text_so_nothing_injects_into_the_shell_line():
    spec = {"method": "draft_model", "model": "d'; touch /tmp/pwned; '", "num_speculative_tokens": 3}
    doc = {
        "rules": [
            {"when": {"model": HOSTILE, "task": "a,b&c=d"}, "arm": "k'3", "speculative_config": spec},
            {"when": {}, "arm": None, "speculative_config": None},
        ]
    }
    d = build(doc, model=HOSTILE, candidates={"k'3": A("k'3", "vllm", HOSTILE, {}, spec)})
    for entry in deploy.serve_lines(d):
        assert shlex.split(entry["command"]) == entry["argv"]
        assert entry["argv"][2] == HOSTILE and f"--served-model-name={HOSTILE}" in entry["argv"]
    spec_argv = deploy.serve_lines(d)[1]["argv"]
    assert json.loads(spec_argv[spec_argv.index("--speculative-config") + 1]) == spec
    # The script's comments never carry a label or model: each command is one line.
    script = deploy.serve_script(d)
    assert "rm -rf" not in "".join(line for line in script.splitlines() if line.startswith("#"))
    # A comma would split LiteLLM's x-litellm-tags header: feature values are percent-encoded.
    assert "specreview-slice:task=a%2Cb%26c%3Dd" in {r["tag"] for r in d.table}


def test_it_refuses_a_model_name_vllm_would_read_as_an_option():
    with pytest.raises(deploy.DeployError, match=r"arm 'base': target model '--trust-remote-code'"):
        deploy.serve_argv(arm=A("base", "vllm", "--trust-remote-code"), served_model="m", port=1)
    with pytest.raises(deploy.DeployError, match=r"engine_args key 'x y'"):
        deploy.serve_argv(arm=A("base", "vllm", "m", {"x y": 1}), served_model="m", port=1)


def test_it_refuses_a_pool_it_could_not_start_when_building_not_when_writing():
    with pytest.raises(deploy.DeployError, match=r"arm 'k2': target model '-x'"):
        build(candidates={"k2": A("k2", "vllm", "-x", {}, K2), "k4": A("k4", "vllm", "m", {}, K4)})


def test_it_refuses_rules_that_no_longer_match_the_experiments_arm():
    with pytest.raises(
        deploy.DeployError, match=r"rule routes to arm 'k4', which the experiment no longer has"
    ):
        build(candidates={"k2": A("k2", "vllm", "m", {}, K2)})
    with pytest.raises(deploy.DeployError, match=r"arm 'k2': the experiment's stored speculative_config"):
        build(candidates={"k2": A("k2", "vllm", "m", {}, K4), "k4": A("k4", "vllm", "m", {}, K4)})


def test_litellm_loads_the_config_and_routes_every_slice_tag_to_its_pool():
    d = build()
    config, router = load_router(deploy.router_yaml(d))
    assert config["router_settings"] == {"enable_tag_filtering": True}
    seen = router.registry().deployments("m")
    assert [x["model_info"]["specreview_pool"] for x in seen] == ["baseline", "spec-1", "spec-2"]
    assert [x["litellm_params"]["api_base"] for x in seen] == [
        f"http://127.0.0.1:{p}/v1" for p in (8100, 8101, 8102)
    ]
    for row in d.table:
        assert routed_pool(router, "m", [row["tag"]]) == row["pool"], row
    # No tag (the client did not classify) and an unknown tag go where unseen values go: the default.
    assert routed_pool(router, "m", None) == "spec-2"
    assert routed_pool(router, "m", ["specreview-slice:task=nope&traffic_class=*"]) == "spec-2"


def test_litellm_routes_requests_as_the_policy_does():
    """Each request's slice tag, computed from its features, reaches the pool of the arm the
    policy's own first-match routing (policy_router.policy_route) gives it."""
    d = build()
    rows = [
        {"request_id": f"r{i}", "task": task, "traffic_class": cls}
        for i, (task, cls) in enumerate(
            [(t, c) for t in ("code", "json", "chat", "a,b") for c in ("batch", "interactive")]
        )
    ]
    features = features_frame(rows)
    expected = policy_router.policy_route(DOC["rules"], features)
    _, router = load_router(deploy.router_yaml(d))
    arm_of_pool = {p.name: (None if p.is_baseline else p.arm.label) for p in d.pools}
    for rid, row in features.iterrows():
        tag = deploy.slice_tag(row.to_dict(), d.domains)
        assert arm_of_pool[routed_pool(router, "m", [tag])] == expected.loc[rid, "arm"], (rid, tag)


def test_it_keeps_yaml_injection_out_of_the_router_config():
    evil = "m\nrouter_settings:\n  enable_tag_filtering: false\n- model_name: x"
    doc = {
        "rules": [
            {
                "when": {"model": evil, "task": "t: [1]"},
                "arm": "a\n  tags: [default]",
                "speculative_config": K2,
            },
            {"when": {}, "arm": None, "speculative_config": None},
        ]
    }
    d = build(
        doc, model=evil, candidates={"a\n  tags: [default]": A("a\n  tags: [default]", "vllm", evil, {}, K2)}
    )
    config, router = load_router(deploy.router_yaml(d))
    assert config["router_settings"] == {"enable_tag_filtering": True}
    assert [m["model_name"] for m in config["model_list"]] == [evil, evil]
    assert config["model_list"][1]["model_info"]["specreview_arm"] == "a\n  tags: [default]"
    assert routed_pool(router, evil, [deploy.slice_tag({"task": "t: [1]"}, d.domains)]) == "spec-1"
    assert routed_pool(router, evil, None) == "baseline"


def test_it_encodes_booleans_and_keeps_them_apart_from_strings():
    doc = {
        "rules": [
            {"when": {"model": "m", "has_schema": True}, "arm": "k2", "speculative_config": K2},
            {"when": {}, "arm": None, "speculative_config": None},
        ]
    }
    d = build(doc)
    assert deploy.slice_tag({"has_schema": True}, d.domains) == "specreview-slice:has_schema=true"
    assert deploy.slice_tag({"has_schema": "true"}, d.domains) == "specreview-slice:has_schema=*"
    assert {r["tag"]: r["pool"] for r in d.table} == {
        "specreview-slice:has_schema=true": "spec-1",
        "specreview-slice:has_schema=*": "baseline",
    }


# --- from a fitted policy: pages, downloads, API ------------------------------------------------


@pytest.fixture
def policy(db, engineer):
    experiment = experiment_synthesize(n_requests=60, ks=(2, 4), loads="1x", repeats=2, seed=2, name="deploy")
    return policy_fit(experiment=experiment, created_by=engineer)


def test_it_reads_the_experiments_stored_arm_configs(policy):
    d = policy_deployment(policy=policy)
    arms = {a.label: a.config for a in policy.experiment.arms.select_related("config")}
    routed = {r["arm"] for r in policy.rules["rules"] if r["arm"]}
    assert {p.arm.label for p in d.pools if not p.is_baseline} == routed
    for p in d.pools:
        assert p.arm.speculative_config == arms[p.arm.label].speculative_config
        assert p.arm.target_model == arms[p.arm.label].target_model


def test_it_downloads_the_serve_lines_and_the_router_config(viewer_client, policy):
    d = policy_deployment(policy=policy)
    page = viewer_client.get(f"/policies/{policy.pk}/").content.decode()
    assert f'href="/policies/{policy.pk}/vllm-serve.sh"' in page
    assert f'href="/policies/{policy.pk}/litellm.yaml"' in page
    serve = viewer_client.get(f"/policies/{policy.pk}/vllm-serve.sh")
    assert serve.status_code == 200 and serve["Content-Type"].startswith("text/x-shellscript")
    assert serve["X-Rules-SHA256"] == policy.rules_sha256
    commands = [x for x in serve.content.decode().splitlines() if not x.startswith("#")]
    assert commands == [e["command"] for e in deploy.serve_lines(d)]
    conf = viewer_client.get(f"/policies/{policy.pk}/litellm.yaml")
    assert conf.status_code == 200 and 'filename="slice-policy-' in conf["Content-Disposition"]
    _, router = load_router(conf.content.decode())
    for row in d.table:
        assert routed_pool(router, d.model, [row["tag"]]) == row["pool"]


def test_it_serves_the_deployment_over_the_api(client, policy, viewer, api_token_for):
    auth = api_token_for(viewer)
    detail = client.get(f"/api/policies/{policy.pk}", **auth).json()
    assert detail["downloads"]["litellm_config"] == f"/policies/{policy.pk}/litellm.yaml"
    response = client.get(detail["downloads"]["deployment"], **auth)
    assert response.status_code == 200
    body = response.json()
    assert body["router"] == "litellm" and body["rules_sha256"] == policy.rules_sha256
    assert [p["pool"] for p in body["pools"]] == [p.name for p in policy_deployment(policy=policy).pools]
    assert client.get("/api/policies/999999/deployment", **auth).status_code == 404


def test_it_answers_409_when_an_arm_changed_since_the_fit(
    client, viewer_client, policy, viewer, api_token_for
):
    from console.experiments.models import ServingConfig

    routed = next(r for r in policy.rules["rules"] if r["arm"])
    arm = policy.experiment.arms.get(label=routed["arm"])
    ServingConfig.objects.filter(pk=arm.config_id).update(
        speculative_config={"method": "ngram", "num_speculative_tokens": 9}
    )
    response = client.get(f"/api/policies/{policy.pk}/deployment", **api_token_for(viewer))
    assert response.status_code == 409 and routed["arm"] in response.json()["error"]
    assert viewer_client.get(f"/policies/{policy.pk}/litellm.yaml").status_code == 409
    page = viewer_client.get(f"/policies/{policy.pk}/")
    assert page.status_code == 200 and "cannot be deployed" in page.content.decode()
