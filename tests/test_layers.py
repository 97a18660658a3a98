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
    frozenset({"io", "wheels", "demo"}),
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
