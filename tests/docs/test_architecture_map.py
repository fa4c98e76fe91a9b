"""docs/architecture.md, the map of the code, held against the code: it names every module of the
package, puts every room (a folder or a loose module of seq2seq/) on a floor, and no room imports
one on its own floor or above. In bench/, the library imports no script and no family another."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "seq2seq"
BENCH = ROOT / "bench"
MAP = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
FLOOR_ROW = re.compile(r"^\| (\d+) \| (`[^|]+`) \|$", re.M)  # | 3 | `data/`, `formats/` |


def rooms(top: Path) -> list[str]:
    """The folders (``x/``) and loose modules (``x.py``) of a package."""
    return sorted(
        f"{p.name}/" if p.is_dir() else p.name
        for p in top.iterdir()
        if (p / "__init__.py").is_file() or (p.suffix == ".py" and p.name != "__init__.py")
    )


def arrows(top: Path) -> list[tuple[str, str, str]]:
    """(room, room it imports, file) for every import between two rooms of ``top``, lazy ones too."""
    names = set(rooms(top))
    found = []
    for file in sorted(top.rglob("*.py")):
        first = file.relative_to(top).parts[0]
        room = first if first.endswith(".py") else f"{first}/"
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            else:
                continue
            for parts in (module.split(".") for module in modules):
                if parts[0] == top.name and len(parts) > 1:
                    target = next((r for r in (f"{parts[1]}/", f"{parts[1]}.py") if r in names), None)
                    if target and target != room:
                        found.append((room, target, file.relative_to(ROOT).as_posix()))
    return found


def map_floors() -> dict[str, int]:
    return {
        room: int(floor)
        for floor, cells in FLOOR_ROW.findall(MAP)
        for room in re.findall(r"`([^`]+)`", cells)
    }


def test_every_module_of_the_package_is_on_the_map() -> None:
    modules = [path.relative_to(PACKAGE).as_posix() for path in sorted(PACKAGE.rglob("*.py"))]
    named = [module for module in modules if not module.endswith("__init__.py")]
    missing = [module for module in named if f"`{module}`" not in MAP and f"`seq2seq/{module}`" not in MAP]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"


def test_every_room_is_on_one_floor() -> None:
    assert sorted(map_floors()) == rooms(PACKAGE)
    assert len(set(map_floors().values())) >= 5  # the table is read: a change of its format fails here


def test_a_room_imports_only_rooms_on_lower_floors() -> None:
    floors = map_floors()
    upward = [
        f"{file}: {room} (floor {floors[room]}) imports {target} (floor {floors[target]})"
        for room, target, file in arrows(PACKAGE)
        if floors.get(target, 0) >= floors.get(room, 0)
    ]
    assert not upward, "\n".join(upward)


def test_bench_scripts_share_only_the_library() -> None:
    crossing = [
        f"{file}: {room} imports {target}" for room, target, file in arrows(BENCH) if target != "lib/"
    ]
    assert "lib/" in rooms(BENCH)
    assert not crossing, "\n".join(crossing)
