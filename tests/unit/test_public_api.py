"""Public and internal, visible and kept apart (docs/architecture.md, "Public
API"): tests and the umbrella (the CLI, dev stack and demo) import only
public modules, except the internals a test names in its module-level
``INTERNALS`` tuple; and the table in the docs is the whole public surface.

A module is internal when a part of its dotted name starts with ``_`` (core,
reader_agent, spark), when it is inside the coordinator (but its package and
``cli``), or inside the umbrella's CLI (but its package). Imports are read
from the syntax tree, function-level ones and dotted strings (``importlib``,
``monkeypatch.setattr("multikafka.…")``) included."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

INTERNALS = (
    "multikafka.cli.watch",
    "multikafka.coordinator.state.etcd",
    "multikafka.core._offsets",
    "multikafka.reader_agent._agent",
    "multikafka.spark._source",
)


REPO = Path(__file__).resolve().parents[2]
#: Each distribution's source root.
ROOTS = ["core/src", "coordinator/src", "reader_agent/src", "spark_bridge/src", "src"]
#: The umbrella's own packages: it may use their internals.
UMBRELLA = ("multikafka.cli", "multikafka.devstack", "multikafka.demo")
DOTTED = re.compile(r"multikafka(\.\w+)+")


def _modules() -> dict[str, Path]:
    found = {}
    for root in ROOTS:
        for path in (REPO / root).rglob("*.py"):
            parts = list(path.relative_to(REPO / root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts and parts[0] in ("multikafka", "pyspark_multikafka"):
                found[".".join(parts)] = path
    return found


MODULES = _modules()


def internal(module: str) -> bool:
    parts = module.split(".")
    if any(p.startswith("_") and not p.startswith("__") for p in parts):
        return True
    if parts[:2] == ["multikafka", "coordinator"] and len(parts) > 2:
        return parts[2] != "cli"
    return parts[:2] == ["multikafka", "cli"] and len(parts) > 2


def _longest_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in MODULES:
            return ".".join(parts[:n])
    return None


def imported(tree: ast.AST) -> Iterator[str]:
    """The multikafka modules a module imports or names in a dotted string."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("multikafka"):
                    yield _longest_module(alias.name) or alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if not node.module.startswith(("multikafka", "pyspark_multikafka")):
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield sub if sub in MODULES else node.module
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and DOTTED.fullmatch(node.value)
        ):
            module = _longest_module(node.value)
            if module is not None:
                yield module


def declared(tree: ast.Module) -> tuple[str, ...]:
    """A test module's ``INTERNALS``: the internal modules (or packages) it tests."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "INTERNALS" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple), "INTERNALS is a tuple of module names"
            return value
    return ()


def _covers(declaration: str, module: str) -> bool:
    return module == declaration or module.startswith(declaration + ".")


def test_tests_use_internals_only_where_they_say_so() -> None:
    undeclared, stale = [], []
    for path in sorted((REPO / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text())
        names = declared(tree)
        used = {m for m in imported(tree) if internal(m)}
        where = str(path.relative_to(REPO))
        undeclared += [(where, m) for m in sorted(used) if not any(_covers(d, m) for d in names)]
        stale += [(where, d) for d in names if not any(_covers(d, m) for m in used)]
    assert undeclared == [], "import the public name, or add the module to INTERNALS"
    assert stale == [], "INTERNALS names modules the test does not use"


def test_the_umbrella_uses_only_what_is_public() -> None:
    """The CLI, the dev stack and the demo are built on the public API as a
    user's program would be (their own modules aside); so is the
    ``multikafka`` package's list of public names."""
    found = []
    for module, path in MODULES.items():
        if not (module.startswith(UMBRELLA) or module == "multikafka"):
            continue
        for used in imported(ast.parse(path.read_text())):
            if internal(used) and not used.startswith(UMBRELLA):
                found.append((module, used))
    assert found == []


def _documented() -> list[str]:
    text = (REPO / "docs/architecture.md").read_text()
    section = text.split("## Public API", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([\w.*]+)` \|", section, flags=re.MULTILINE)


def test_the_docs_list_the_whole_public_surface() -> None:
    public = sorted(m for m in MODULES if not internal(m))
    documented = _documented()
    assert len(documented) > 15

    def listed(module: str, entry: str) -> bool:
        if entry.endswith(".*"):
            return module == entry[:-2] or module.startswith(entry[:-1])
        return module == entry

    assert [m for m in public if not any(listed(m, e) for e in documented)] == []
    assert [e for e in documented if not any(listed(m, e) for m in public)] == []


def test_the_rule_tells_public_from_internal() -> None:
    assert internal("multikafka.core._offsets")
    assert internal("multikafka.coordinator.state.etcd")
    assert internal("multikafka.cli.watch")
    assert not internal("multikafka.coordinator")
    assert not internal("multikafka.coordinator.cli")
    assert not internal("multikafka.core.model")
    assert not internal("multikafka.v1.admin_pb2")
    tree = ast.parse(
        "from multikafka.core import _offsets as ov\n"
        "def f(m):\n"
        "    from multikafka.spark._source import x\n"
        "    m.setattr('multikafka.reader_agent._agent.get_agent', None)\n"
    )
    assert sorted(imported(tree)) == [
        "multikafka.core._offsets",
        "multikafka.reader_agent._agent",
        "multikafka.spark._source",
    ]
