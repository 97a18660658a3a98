"""The package's layers only point down: no module imports a layer above its own, not even inside
a function. The order is the one the README's package tour lists."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "contractrl"
# lowest first; a module may import its own layer and any layer before it
LAYERS: tuple[frozenset[str], ...] = (
    frozenset({"", "errors", "files", "configtree"}),  # "" is contractrl/__init__.py (the version)
    frozenset({"validators"}),
    frozenset({"io", "wheels", "carry", "demo"}),
    frozenset({"tasks"}),
    frozenset({"rollout"}),
    frozenset({"evidence"}),
    frozenset({"trainer", "selector"}),  # the two trainers: the LM (SFT, GRPO) and the selector (PPO)
    frozenset({"gate"}),  # the runtime repair gate: serves what the trainers produced
    frozenset({"analysis"}),
    frozenset({"experiments"}),
    frozenset({"pipeline"}),
    frozenset({"cli", "__main__"}),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    """``contractrl.rollout.env`` -> ``rollout``; ``contractrl`` -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _imported(path: Path, root: Path = PACKAGE) -> set[str]:
    own = ".".join(path.relative_to(root.parent).with_suffix("").parts)
    package = own if path.name == "__init__.py" else own.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            if base == "contractrl":
                found.update(f"contractrl.{alias.name}" for alias in node.names)
            elif base.startswith("contractrl."):
                found.add(base)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("contractrl."))
    return found


def _module_layer(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return "" if parts == ("__init__",) else parts[0]


def test_every_module_has_a_layer() -> None:
    layers = {_module_layer(p) for p in PACKAGE.rglob("*.py")}
    assert layers <= set(RANK), f"modules outside every layer: {sorted(layers - set(RANK))}"


def test_no_import_points_up() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mine = RANK[_module_layer(path)]
        for module in sorted(_imported(path)):
            target = _top(module)
            if RANK.get(target, 0) > mine:  # contractrl.__version__ and the like: the root layer
                upward.append(f"{path.relative_to(PACKAGE.parent)} imports {module}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The scanner itself: a function-level import of analysis from rollout is found."""
    module = tmp_path / "contractrl" / "rollout" / "x.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from ..analysis.tables import TABLES\n    from contractrl import pipeline\n")
    assert _imported(module, tmp_path / "contractrl") == {"contractrl.analysis.tables", "contractrl.pipeline"}


# Groups of modules that still import each other (one side inside a function), until they are
# folded; any other cycle fails. trainer.presets and trainer.smollm2 were one: trainer/model_cache.py
# now holds what both need.
KNOWN_CYCLES = {
    frozenset({"contractrl.trainer.tune", "contractrl.trainer.tune_wandb"}),
    frozenset({"contractrl.validators.budget", "contractrl.validators.dialects", "contractrl.validators.ecma_regex"}),
}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _module_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Each module of the package -> the package's modules it imports (``from . import x`` names x,
    not the package it is in)."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = (
                    ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                    if node.level
                    else node.module or ""
                )
                named = {f"{base}.{a.name}" for a in node.names} & paths.keys()
                if node.module or len(named) < len(node.names):  # ``from . import x``: x, not the package
                    named.add(base)
                targets.update(named & paths.keys())
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name in paths)
        graph[name] = targets - {name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The groups of modules that reach each other through imports (strongly connected, size > 1)."""
    reach = {m: set() for m in graph}
    for start in graph:
        todo = list(graph[start])
        while todo:
            nxt = todo.pop()
            if nxt not in reach[start] and nxt in graph:
                reach[start].add(nxt)
                todo.extend(graph[nxt])
    groups = {frozenset({m, *(o for o in reach[m] if m in reach[o])}) for m in graph}
    return {g for g in groups if len(g) > 1}


def test_no_two_modules_import_each_other() -> None:
    found = _cycles(_module_graph())
    assert found <= KNOWN_CYCLES, "modules that import each other:\n" + "\n".join(
        " <-> ".join(sorted(group)) for group in sorted(found - KNOWN_CYCLES, key=sorted)
    )


def test_the_check_sees_a_cycle(tmp_path: Path) -> None:
    """The scanner itself: a function-level ``from . import b`` in a, and a module-level import of a in b."""
    root = tmp_path / "contractrl"
    (root / "trainer").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "trainer" / "__init__.py").write_text("")
    (root / "trainer" / "a.py").write_text("def f():\n    from . import b\n")
    (root / "trainer" / "b.py").write_text("from .a import f\n")
    (root / "trainer" / "c.py").write_text("from .a import f\nfrom . import b\n")
    assert _cycles(_module_graph(root)) == {frozenset({"contractrl.trainer.a", "contractrl.trainer.b"})}
