"""The house's rules that a linter does not state by itself: every library module has a layer
(import-linter checks only the modules its contracts name)."""

from __future__ import annotations

import ast
import functools
import inspect
import pickle
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tidemark.hourcommit.base import HourVersions
from tidemark.hourcommit.inputs import HourInputs
from tidemark.hourcommit.publication import HourPublication
from tidemark.hourcommit.renaming import RenamingVersions
from tidemark.hourcommit.versioned import OwnDirectoryVersions

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
LIBRARY = ROOT / "plugins" / "tidemark"


_PARSE_ALL = """
import ast, pickle, sys
from pathlib import Path
trees = {str(p): ast.parse(p.read_text()) for root in sys.argv[1:] for p in Path(root).rglob("*.py")}
sys.stdout.buffer.write(pickle.dumps(trees))
"""


@functools.cache
def _parsed() -> dict[str, ast.Module]:
    """Every module of the library and the tests, parsed once in a fresh interpreter. In this
    pytest worker another test's thread may be parsing at the same moment, and CPython 3.11's
    AST construction keeps one counter per interpreter (gh-106905): ``ast.parse`` here failed a
    CI run with "AST constructor recursion depth mismatch"."""
    done = subprocess.run(
        [sys.executable, "-c", _PARSE_ALL, str(LIBRARY), str(ROOT / "tests")],
        capture_output=True,
        timeout=120,
        check=True,
    )
    trees: dict[str, ast.Module] = pickle.loads(done.stdout)
    return trees


def parse(path: Path) -> ast.Module:
    return _parsed()[str(path)]


def layered_names() -> list[str]:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers"]
    return [name for layer in layers for name in re.split(r"\s*[|:]\s*", layer.strip())]


def library_modules() -> list[str]:
    """Every module of the library; a package's ``__init__`` only where it holds code (those
    of ``family/`` and ``group/`` are docstrings; ``catalog/``'s holds the catalog itself)."""
    modules = []
    for path in sorted(LIBRARY.rglob("*.py")):
        parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            body = parse(path).body
            if all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body):
                continue
            parts = parts[:-1]
        modules.append(".".join(parts))
    return [m for m in modules if m != "tidemark"]


def test_the_root_package_holds_no_code_of_a_layer() -> None:
    """``tidemark`` itself, above every layer by its name, holds the version only."""
    body = parse(LIBRARY / "__init__.py").body
    imports: list[ast.stmt] = [n for n in body if isinstance(n, ast.Import)]
    imports += [n for n in body if isinstance(n, ast.ImportFrom) and n.module != "__future__"]
    assert not imports


def test_every_library_module_lies_in_a_layer() -> None:
    names = layered_names()
    outside = [m for m in library_modules() if not any(m == n or m.startswith(f"{n}.") for n in names)]
    assert outside == [], f"modules in no import-linter layer (pyproject.toml): {outside}"
    assert len(names) == len(set(names)), "a name in two layers"


def test_the_check_finds_the_modules_it_covers() -> None:
    modules = library_modules()
    assert {"tidemark.cli", "tidemark.ingest.decoders", "tidemark.ingest.decoders.base"} <= set(modules)
    assert "tidemark.family" not in modules and "tidemark.family.discovery" in modules
    assert {"tidemark.catalog", "tidemark.catalog.families"} <= set(modules)  # a package with code
    assert len(modules) > 100


def documented_packages() -> dict[str, set[str]]:
    """The package table of docs/how-tidemark-is-built.md: package -> the modules its row names
    (``(top)``: the top-level modules; a sub-package as ``name/``)."""
    page = (ROOT / "docs" / "how-tidemark-is-built.md").read_text()
    rows: dict[str, set[str]] = {}
    for line in page.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 4 or not (cells[1] == "(top)" or re.fullmatch(r"`\w+/`", cells[1])):
            continue
        package = "" if cells[1] == "(top)" else cells[1].strip("`/")
        rows[package] = {name.rstrip("/") for name in re.findall(r"`([\w/]+)`", cells[2])}
    return rows


def test_the_house_page_names_every_module_of_each_package() -> None:
    """docs/how-tidemark-is-built.md's table against the code: each package's modules (and
    sub-packages) in its row, no row naming a module that is gone."""
    rows = documented_packages()
    actual: dict[str, set[str]] = {}
    for path in LIBRARY.iterdir():
        if path.is_dir() and (path / "__init__.py").is_file():
            actual[path.name] = {
                p.stem if p.is_file() else p.name
                for p in path.iterdir()
                if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()
            }
        elif path.suffix == ".py" and path.stem != "__init__":
            actual.setdefault("", set()).add(path.stem)
    assert sorted(rows) == sorted(actual), "a package without its row, or a row without its package"
    for package, modules in actual.items():
        named = rows[package]
        assert modules <= named, f"{package or '(top)'}: not in the house page: {sorted(modules - named)}"
        assert named <= modules, f"{package or '(top)'}: named but gone: {sorted(named - modules)}"


def test_no_test_module_imports_another() -> None:
    """Shared test code lives in tests/helpers/; a test module importing another runs its
    fixtures and tests twice and ties the two together."""
    importing = [
        f"{path.relative_to(ROOT)}: {node.module}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for node in ast.walk(parse(path))
        if isinstance(node, ast.ImportFrom)
        and node.module
        and re.match(r"tests\.(unit|integration|e2e)\.", node.module)
    ]
    assert importing == []


def test_no_module_asks_whether_the_warehouse_is_an_object_store() -> None:
    """The kind of warehouse is chosen once per table (``tablefs.storage_kind``, the factories of
    ``hourcommit`` and ``ingest/publishers``); every other module calls the implementation it
    was handed, so a third kind of table is one more implementation, not one more branch."""
    allowed = {"tablefs.py", "hourcommit", "publishers"}
    asking = re.compile(r"\bobject_store\b|\bis_object_store\(")
    found = [
        f"{path.relative_to(LIBRARY)}:{number}"
        for path in sorted(LIBRARY.rglob("*.py"))
        if not allowed & set(path.relative_to(LIBRARY).parts)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asking.search(line.split("#", 1)[0])
    ]
    assert not found, f"branches on the kind of warehouse outside its implementations: {found}"


def test_modules_and_functions_stay_short() -> None:
    """No module over 400 lines and no function over 80 (the argparse wiring,
    ``cli.build_parser``, aside): a longer one hides steps without names. In ``airflow/`` no
    function over 60, DAG builders included: a DAG file wires tasks, each one library call."""
    long_modules, long_functions = [], []
    for path in sorted(LIBRARY.rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long_modules.append(str(path.relative_to(LIBRARY)))
        limit = 60 if path.parent.name == "airflow" else 80
        for node in ast.walk(parse(path)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.end_lineno is None:
                continue
            if node.end_lineno - node.lineno + 1 > limit and node.name != "build_parser":
                long_functions.append(f"{path.relative_to(LIBRARY)}:{node.name}")
    assert not long_modules, f"modules over 400 lines: {long_modules}"
    assert not long_functions, f"functions over 80 lines (60 in airflow/): {long_functions}"


def test_operators_take_their_table_not_parse_it_from_their_arguments() -> None:
    """An operator that needs its table is given it (``table=``), never finds it by parsing
    ``--table`` out of the spark-submit arguments it passes on."""
    text = (LIBRARY / "airflow" / "operators.py").read_text()
    assert '"--table"' not in text and "'--table'" not in text


def _code_files() -> list[tuple[str, Path]]:
    """The library's, the entry points' and the DAG files' modules, by a name relative to
    the repository's code roots."""
    roots = [LIBRARY, ROOT / "spark_jobs", ROOT / "dags"]
    return [(str(path.relative_to(root)), path) for root in roots for path in sorted(root.rglob("*.py"))]


def test_a_tables_state_records_are_opened_through_its_table_handle() -> None:
    """Commit log, journal, audit log, writer mode, schema history and locks of a table are
    reached through its ``Table`` handle (``Table.open`` for a job, ``Table.read`` for a
    reader: one door, each record opened once per handle), never built directly, in the
    library, the spark-submit entry points or the DAG files. ``TableState`` is built in
    table.py only (import-linter protects its module too). A group's or a family's own
    records (``group/roster``, ``stream/group``, ``family/retirement``) are not a table's."""
    records = re.compile(r"\b(CommitLog|HourJournal|AuditLog|TableWriter|SchemaHistory|TableLock)\(")
    not_a_table = {"group/roster.py", "stream/group.py", "family/retirement.py"}
    found = [
        f"{relative}:{number}"
        for relative, path in _code_files()
        if relative not in not_a_table and not relative.startswith("state/") and relative != "table_state.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if records.search(line) and not line.lstrip().startswith(("class ", "def "))
    ]
    assert not found, f"a table's state records built outside its handle: {found}"
    built = [
        f"{relative}:{number}"
        for relative, path in _code_files()
        if relative != "table.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "TableState(" in line and not line.lstrip().startswith("class ")
    ]
    assert not built, f"TableState built outside table.py: {built}"


def test_the_dags_share_one_function_per_task_group() -> None:
    """The announce, remerge, metrics and deadline tasks and the dump and seal arguments are
    built in ``airflow/task_groups.py`` only; a DAG module wires them and builds no variant."""
    built = re.compile(r"\b(announce_task|remerge_tasks|deadlines_task)\(|\"--processing-time\"")
    found = [
        f"{path.name}:{number}"
        for path in sorted((LIBRARY / "airflow").glob("*.py"))
        if path.name != "task_groups.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if built.search(line)
    ]
    assert not found, f"a DAG module builds a shared task itself: {found}"


def test_no_module_asks_which_table_format_or_commit_it_holds() -> None:
    """A table's format is asked once, in ``hourcommit``'s factory (and validated in
    ``config/``): everything else calls the seams it was composed with (a new format is one
    publication class and one line in ``PUBLICATIONS``)."""
    asked = re.compile(
        r"output\.table_format\s*[!=]=|isinstance\([^)]*(Publication|Versions|Inputs|HourCommit)"
    )
    found = [
        f"{relative}:{number}"
        for relative, path in _code_files()
        if not relative.startswith("config/") and relative != "hourcommit/__init__.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if asked.search(line)
    ]
    assert not found, f"a module asks which table format or commit it holds: {found}"


def test_the_storage_publication_and_inputs_seams_are_small() -> None:
    """The storage seam (where a version is drafted, completed, revealed and found), the
    publication seam (Paimon's ``SnapshotCommit``) and the inputs seam each have at most 8
    methods a caller may call (their facets are class attributes), and none takes a callback:
    what is written into a version, and in which order, is the seal's (``seal/``)."""
    for seam in (HourVersions, HourPublication, HourInputs):
        methods = {
            name: value
            for name, value in vars(seam).items()
            if callable(value) and not name.startswith("_") and not isinstance(value, classmethod)
        }
        assert len(methods) <= 8, f"{seam.__name__} has {len(methods)} methods: {sorted(methods)}"
        for name, method in methods.items():
            hints = inspect.signature(method).parameters.values()
            callbacks = [p.name for p in hints if "Callable" in str(p.annotation)]
            assert not callbacks, f"{seam.__name__}.{name} takes callbacks: {callbacks}"
    assert HourVersions in (RenamingVersions.__base__, OwnDirectoryVersions.__base__)
    assert RenamingVersions.__base__ is OwnDirectoryVersions.__base__  # neither forwards to the other
