"""Static files (issue 22, point 8): pages name content-hashed files, which go out compressed and
cached for a year as immutable; a stale collection is noticed and redone."""

from __future__ import annotations

import gzip
import os
import re
import time

import pytest
from django.test import override_settings

pytestmark = pytest.mark.django_db


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_the_pages_scripts_have_hashed_names_go_out_gzipped_and_are_cached_as_immutable(viewer_client):
    html = viewer_client.get("/").content.decode()
    scripts = re.findall(r'src="(/static/[^"]+\.js)"', html)
    assert scripts and all(re.search(r"\.[0-9a-f]{12}\.js$", s) for s in scripts), scripts
    plotly = "/static/plotly/plotly.min.js"
    from django.contrib.staticfiles.storage import staticfiles_storage

    hashed = "/static/" + staticfiles_storage.stored_name("plotly/plotly.min.js")
    assert hashed != plotly
    plain = viewer_client.get(hashed)
    zipped = viewer_client.get(hashed, HTTP_ACCEPT_ENCODING="gzip, deflate")
    assert plain.status_code == zipped.status_code == 200
    assert zipped["Content-Encoding"] == "gzip" and "Accept-Encoding" in zipped["Vary"]
    raw, packed = _body(plain), _body(zipped)
    assert gzip.decompress(packed) == raw
    assert len(packed) < len(raw) / 3, (len(packed), len(raw))
    cache = zipped["Cache-Control"]
    assert "immutable" in cache and int(re.search(r"max-age=(\d+)", cache).group(1)) >= 365 * 24 * 3600


def test_a_source_newer_than_the_collection_makes_it_stale_and_collecting_makes_it_current(tmp_path):
    from console.static_files import static_collect_if_stale, static_is_stale

    source = tmp_path / "src"
    (source / "js").mkdir(parents=True)
    script = source / "js" / "a.js"
    script.write_text("console.log(1);\n")
    with override_settings(STATIC_ROOT=str(tmp_path / "root"), STATICFILES_DIRS=[str(source)]):
        assert static_is_stale()
        assert static_collect_if_stale() is True
        assert not static_is_stale() and static_collect_if_stale() is False
        later = time.time() + 5
        script.write_text("console.log(2);\n")
        os.utime(script, (later, later))
        assert static_is_stale()
        assert static_collect_if_stale() is True
        from django.contrib.staticfiles.storage import staticfiles_storage

        name = staticfiles_storage.stored_name("js/a.js")
        assert (tmp_path / "root" / name).read_text() == "console.log(2);\n"
