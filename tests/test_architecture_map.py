"""docs/architecture.md, the map of the code by stage, names every module of the package."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "seq2seq"


def test_every_module_of_the_package_is_on_the_map() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    modules = [path.relative_to(PACKAGE).as_posix() for path in sorted(PACKAGE.rglob("*.py"))]
    named = [module for module in modules if not module.endswith("__init__.py")]
    missing = [module for module in named if f"`{module}`" not in text and f"`seq2seq/{module}`" not in text]
    assert not missing, f"docs/architecture.md does not name: {', '.join(missing)}"
