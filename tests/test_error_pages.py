"""The pages a person meets when something is missing or broken: styled like the console, with
its navigation and a way back (the 404 and 500 pages), and the API's interactive docs."""

from __future__ import annotations

import re

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error

pytestmark = pytest.mark.django_db


def test_it_answers_an_unknown_address_with_the_consoles_own_404_page(viewer_client):
    response = viewer_client.get("/experiments/no-such-page/")
    assert response.status_code == 404
    html = response.content.decode()
    assert "<h1>Page not found</h1>" in html and "/experiments/no-such-page/" in html
    assert 'class="topbar"' in html and 'href="/traces/"' in html  # the navigation, signed in
    assert "css/console" in html and 'href="/api/docs/"' in html


def test_it_answers_a_missing_object_with_the_same_404_page(viewer_client):
    response = viewer_client.get("/experiments/999999/")
    assert response.status_code == 404
    assert "<h1>Page not found</h1>" in response.content.decode()


def test_it_renders_its_own_500_page_without_a_request_context():
    response = server_error(RequestFactory().get("/anything/"))
    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html and "css/console" in html
    assert 'class="brand" href="/"' in html and "Traceback" not in html


def test_it_serves_the_api_docs_from_its_own_static_files(viewer_client):
    response = viewer_client.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    scripts = re.findall(r'src="(/static/ninja/swagger-ui-[a-z-]+\.[0-9a-f]{12}\.js)"', html)
    assert len(scripts) == 2 and "cdn" not in html.lower(), html  # the bundle and its init, collected
    assert '"url": "/api/openapi.json"' in html
    assert all(viewer_client.get(s).status_code == 200 for s in scripts)


def test_it_sends_the_api_docs_page_to_the_login_page_when_signed_out(client):
    response = client.get("/api/docs/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
