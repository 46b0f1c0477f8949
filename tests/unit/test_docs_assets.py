"""A Data Docs page keeps no outside address (``tidemark.seal.docs_assets.localize``)."""

from __future__ import annotations

import pytest

from tidemark.seal.docs_assets import localize

pytestmark = pytest.mark.unit

PAGE = """<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<link href="https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css" rel="stylesheet">
<link rel="stylesheet" href="https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css">
<link rel="stylesheet" href="https://fonts.example.com/unknown.css">
<link rel="icon" href="../../../static/images/favicon.ico">
<script src="https://code.jquery.com/jquery-3.7.1.min.js"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@5"></script>
<script src="https://tracker.example.com/t.js"></script>
</head><body>
<a href="../../../../index.html">Home</a> <a href="../../../../expectations/events.html">events</a>
<img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1">
<a href="https://greatexpectations.io/newsletter">news</a>
</body></html>"""


def test_cdn_addresses_point_at_the_vendored_files_and_nothing_else_leaves() -> None:
    page = localize(PAGE, depth=4)
    up = "../../../../"
    assert f'href="{up}static/vendor/bootstrap/dist/css/bootstrap.min.css"' in page
    assert f'href="{up}static/vendor/@fortawesome/fontawesome-free/css/all.min.css"' in page
    assert (
        f'href="{up}static/vendor/bootstrap-table/dist/extensions/filter-control/bootstrap-table-filter-control.css"'
        in page
    )
    assert f'src="{up}static/vendor/jquery/dist/jquery.min.js"' in page
    assert f'src="{up}static/vendor/vega-lite/build/vega-lite.min.js"' in page
    assert (
        f'src="{up}static/images/logo-long.png"' in page and f'href="{up}static/images/favicon.ico"' in page
    )
    assert "unknown.css" not in page and "tracker.example.com" not in page  # no request leaves
    assert "index.html" not in page and "expectations/events.html" not in page  # pages never built
    assert 'href="https://greatexpectations.io/newsletter"' in page  # a link is no request
