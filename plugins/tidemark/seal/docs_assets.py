"""Data Docs that render offline: every CSS, JS, font and image a Great Expectations page asks
for, served beside the page instead of from public CDNs.

GX's pages load about fifteen files from unpkg, jsDelivr, cdnjs, the Bootstrap CDN and an S3
bucket; offline (most data centres) they render unstyled and without their pass/fail icons,
and a login-protected page that can list data values would load third-party scripts. Here:

- :data:`PACKAGES` pins each npm package (version and the registry's sha512 integrity);
  ``python -m tidemark.seal.docs_assets`` (``make docs-assets``, a prerequisite of ``make test``,
  ``demo`` and ``up``) fetches them once into the venv (:func:`assets_dir`);
- :func:`localize` rewrites a page's CDN addresses to ``static/vendor/...`` beside it, drops
  any other outside address (and the "Home" and suite links to pages tidemark never builds);
- :func:`install` copies the vendored files into a docs dir once.
"""

from __future__ import annotations

import base64
import hashlib
import io
import logging
import os
import re
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

REGISTRY = "https://registry.npmjs.org"
# npm package -> (version, sha512 integrity of its tarball, the files a page uses)
PACKAGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "bootstrap": (
        "4.3.1",
        "rXqOmH1VilAt2DyPzluTi2blhk17bO7ef+zLLPlWvG494pDxcM234pJ8wTc/6R40UWizAIIMgxjvxZg5kmsbag==",
        ("dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js"),
    ),
    "jquery": (
        "3.7.1",
        "m4avr8yL8kmFN8psrbFFFmB/If14iN5o9nw/NgnnM+kybDJpRsAynV2BsfpTYrTRysYUdADVD7CkUUizgkpLfg==",
        ("dist/jquery.min.js",),
    ),
    "popper.js": (
        "1.12.9",
        "s0EEi9xiSCdqz9lV4IiVH5yIZnDX/U1t0tCjB+0jXx9jW8lrR7kOpVupiUg175ogqVoudpDXHF1p6dKATCHMeg==",
        ("dist/umd/popper.min.js",),
    ),
    "bootstrap-table": (
        "1.19.1",
        "WvV+l1AI/C+zThaKmfHmi/IuayVNB0qdFyEhFx1jyZhO0oLtNJNANkCR3rvJf6Dkh72dsLElxpE/bzK9seEQLA==",
        (
            "dist/bootstrap-table.min.css",
            "dist/bootstrap-table.min.js",
            "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
            "dist/extensions/filter-control/bootstrap-table-filter-control.css",
        ),
    ),
    "bootstrap-datepicker": (
        "1.9.0",
        "9rYYbaVOheGYxjOr/+bJCmRPihfy+LkLSg4fIFMT9Od8WwWB/MB50w0JO1eBgKUMbb7PFHQD5uAfI3ArAxZRXA==",
        ("dist/css/bootstrap-datepicker.min.css", "dist/js/bootstrap-datepicker.min.js"),
    ),
    "@fortawesome/fontawesome-free": (
        "6.6.0",
        "60G28ke/sXdtS9KZCpZSHHkCbdsOGEhIUGlwq6yhY74UpTiToIh8np7A8yphhM4BWsvNFtIvLpi4co+h9Mr9Ow==",
        ("css/all.min.css", "webfonts/"),  # a trailing / : the whole directory (the icon fonts)
    ),
    "@forevolve/bootstrap-dark": (
        "1.1.0",
        "A3ucpEpxPoTVO490lZZCfjPXxv832l7mm1IxX3bXyxvgwnPGXDLyh7dWrphXKO8YBAu3EswbBEu3VSW8NRMW3A==",
        ("dist/css/bootstrap-prefers-dark.css",),
    ),
    "vega": (
        "5.33.0",
        "jNAGa7TxLojOpMMMrKMXXBos4K6AaLJbCgGDOw1YEkLRjUkh12pcf65J2lMSdEHjcEK47XXjKiOUVZ8L+MniBA==",
        ("build/vega.min.js",),
    ),
    "vega-lite": (
        "5.23.0",
        "l4J6+AWE3DIjvovEoHl2LdtCUkfm4zs8Xxx7INwZEAv+XVb6kR6vIN1gt3t2gN2gs/y4DYTs/RPoTeYAuEg6mA==",
        ("build/vega-lite.min.js",),
    ),
    "vega-embed": (
        "6.29.0",
        "PmlshTLtLFLgWtF/b23T1OwX53AugJ9RZ3qPE2c01VFAbgt3/GSNI/etzA/GzdrkceXFma+FDHNXUppKuM0U6Q==",
        ("build/vega-embed.min.js",),
    ),
}
# the CDN addresses GX 1.x writes -> (package, file); a version in the address is ignored
CDN_FILES = [
    (re.compile(r"https://(?:maxcdn|stackpath)\.bootstrapcdn\.com/bootstrap/[^/]+/(css|js)/(bootstrap\.min\.\w+)"),
     "bootstrap", "dist/{0}/{1}"),
    (re.compile(r"https://code\.jquery\.com/jquery-[\d.]+\.min\.js"), "jquery", "dist/jquery.min.js"),
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/popper\.js/[^/]+/umd/popper\.min\.js"),
     "popper.js", "dist/umd/popper.min.js"),
    (re.compile(r"https://unpkg\.com/bootstrap-table@[^/]+/dist/(\S+?\.(?:css|js))"), "bootstrap-table", "dist/{0}"),
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/bootstrap-datepicker/[^/]+/(css|js)/(\S+?\.(?:css|js))"),
     "bootstrap-datepicker", "dist/{0}/{1}"),
    (re.compile(r"https://cdnjs\.cloudflare\.com/ajax/libs/font-awesome/[^/]+/css/all\.min\.css"),
     "@fortawesome/fontawesome-free", "css/all.min.css"),
    (re.compile(r"https://cdn\.jsdelivr\.net/npm/@forevolve/bootstrap-dark@[^/]+/dist/css/(\S+?\.css)"),
     "@forevolve/bootstrap-dark", "dist/css/{0}"),
    (re.compile(r"https://cdn\.jsdelivr\.net/npm/(vega|vega-lite|vega-embed)@[\d.]+"), "{0}", "build/{0}.min.js"),
]  # fmt: skip
VENDOR = "static/vendor"
# GX's logo from its S3 bucket: the same image is among the static files GX writes
LOGO = re.compile(r"https://great-expectations-web-assets\.s3[^\"']*/logo-long\.png[^\"']*")
OWN_STATIC = re.compile(r"""((?:src|href)=["'])(?:\.\./)+static/""")
EXTERNAL_SOURCE = re.compile(r"""\ssrc=(["'])https?://[^"']*\1""")
EXTERNAL_STYLESHEET = re.compile(r"""<link\b[^>]*\shref=(["'])https?://[^"']*\1[^>]*>""")
# pages tidemark does not build: the site's index ("Home") and the suite's page
UNBUILT = re.compile(r"""\shref=(["'])(?:\.\./)*(?:index\.html|expectations/[^"']+\.html)\1""")


def assets_dir() -> Path:
    """Where the vendored files live: the venv's ``share/tidemark/docs-assets``."""
    return Path(
        os.environ.get("TIDEMARK_DOCS_ASSETS", Path(sys.prefix) / "share" / "tidemark" / "docs-assets")
    )


def _verified(package: str, version: str, integrity: str) -> bytes:
    name = package.rsplit("/", 1)[-1]
    url = f"{REGISTRY}/{package}/-/{name}-{version}.tgz"
    with urllib.request.urlopen(url, timeout=60) as response:
        body: bytes = response.read()
    digest = base64.b64encode(hashlib.sha512(body).digest()).decode()
    if digest != integrity:
        raise RuntimeError(f"{url}: sha512 {digest} is not the pinned {integrity}")
    return body


def _extract(tarball: bytes, into: Path, files: tuple[str, ...]) -> None:
    """The named files (a trailing ``/``: a whole directory) of an npm tarball into ``into``."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive.getmembers():
            inside = member.name.split("/", 1)[-1]  # npm tarballs hold package/<files>
            wanted = any(inside == f or (f.endswith("/") and inside.startswith(f)) for f in files)
            source = archive.extractfile(member) if member.isfile() and wanted else None
            if source is not None:
                out = into / inside
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(source.read())


def fetch(target: Path | None = None) -> Path:
    """Every pinned package's files into ``target`` (once: a complete copy is kept)."""
    target = target or assets_dir()
    if (target / ".complete").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=".docs-assets-", dir=target.parent))  # then a rename, not a copy
    try:
        for package, (version, integrity, files) in PACKAGES.items():
            _extract(_verified(package, version, integrity), partial / package, files)
            log.info("docs assets: %s %s", package, version)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    (partial / ".complete").write_text("\n".join(f"{p} {v[0]}" for p, v in PACKAGES.items()))
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)
    return target


def install(docs_dir: Path) -> bool:
    """The vendored files into ``docs_dir/static/vendor`` (once); False when they were never
    fetched (the pages then keep no outside address, and render unstyled)."""
    source = assets_dir()
    if not (source / ".complete").is_file():
        log.warning("Data Docs assets missing from %s: run `make docs-assets`; pages render unstyled", source)
        return False
    if not (docs_dir / VENDOR / ".complete").is_file():
        partial = Path(tempfile.mkdtemp(prefix=".vendor-", dir=docs_dir))
        shutil.copytree(source, partial, dirs_exist_ok=True)
        (docs_dir / VENDOR).parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(docs_dir / VENDOR, ignore_errors=True)
        partial.rename(docs_dir / VENDOR)
    return True


def _vendored(up: str, package: str, path: str) -> Callable[[re.Match[str]], str]:
    """The replacement of one CDN address: its vendored copy, ``up`` from the page."""

    def replace(match: re.Match[str]) -> str:
        groups = match.groups()
        return f"{up}{VENDOR}/{package.format(*groups)}/{path.format(*groups)}"

    return replace


def localize(page: str, depth: int) -> str:
    """``page`` (``depth`` directories below the docs dir) with every CDN address pointing at
    the vendored copy, every other outside resource (a script, an image, a style sheet) removed,
    and links to unbuilt pages dropped. A link to an outside site stays: it is no request."""
    up = "../" * depth
    for pattern, package, path in CDN_FILES:
        page = pattern.sub(_vendored(up, package, path), page)
    page = LOGO.sub(f"{up}static/images/logo-long.png", page)
    page = OWN_STATIC.sub(lambda m: f"{m.group(1)}{up}static/", page)  # GX puts its favicon a level short
    page = UNBUILT.sub("", page)
    return EXTERNAL_STYLESHEET.sub("", EXTERNAL_SOURCE.sub("", page))


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="tidemark: %(message)s")
    print(f"tidemark: Data Docs assets in {fetch()}")
