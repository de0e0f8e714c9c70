"""The layering docs/architecture.md states, held: no facerun module imports one above it (lazy imports included)
unless its paragraph names that import as a lazy exception, nor one its paragraph says it never imports."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "facerun"
DOC = ROOT / "docs" / "architecture.md"
NAME = r"`([\w./]+)`"


def _module_of(name: str) -> str:
    """`gpu/`, `gpu`, `face/families.py`, `zoo.card`, `errors.py` -> facerun.gpu, facerun.face.families, ..."""
    name = name.strip("/").removesuffix(".py").replace("/", ".")
    return f"facerun.{name}"


def layers() -> list[dict]:
    """The paragraphs of "Packages and modules", bottom first: what each owns, and its stated exceptions."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Packages and modules", 1)[1].split("\n## ", 1)[0]
    found = []
    for paragraph in re.split(r"\n\s*\n", section):
        paragraph = " ".join(paragraph.split())
        head = re.match(r"\*\*(.+?)\*\*", paragraph)
        if not head:
            continue
        body = paragraph[head.end():]
        lazy = {_module_of(n) for n in re.findall(NAME + r"\s*\(?lazily", body)}
        never = set()
        for listed in re.findall(r"never ((?:" + NAME + r"(?:, | or | and )?)+)", body):
            never |= {_module_of(n) for n in re.findall(NAME, listed[0])}
        only = None
        nothing_but = re.search(r"nothing from facerun but ((?:" + NAME + r"(?:, | or | and )?)+)", body)
        if nothing_but:
            only = {_module_of(n) for n in re.findall(NAME, nothing_but.group(1))}
        elif re.search(r"Imports numpy only", body):
            only = set()
        found.append({"owns": [_module_of(n) for n in re.findall(NAME, head.group(1))], "lazy": lazy,
                      "never": never, "only": only, "head": head.group(1)})
    return found


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(part + ".")


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(module: str, path: Path, known) -> set[str]:
    """The facerun modules `module` imports anywhere in its file (at the top or inside functions)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("facerun") and target != module:
                found.add(target)
    return found


def rank_of(module: str, table: list[dict]) -> int | None:
    """The paragraph owning `module` (the most specific name wins: `zoo/card.py` over `zoo/`)."""
    best, depth = None, -1
    for i, layer in enumerate(table):
        for part in layer["owns"]:
            if _within(module, part) and part.count(".") > depth:
                best, depth = i, part.count(".")
    return best


def test_the_doc_states_an_order():
    table = layers()
    heads = [layer["head"] for layer in table]
    assert len(table) >= 10, heads
    assert rank_of("facerun.errors", table) == 0
    assert rank_of("facerun.net", table) < rank_of("facerun.face.detect", table) < rank_of("facerun.people", table)
    assert rank_of("facerun.people.index", table) < rank_of("facerun.bench.bench", table)
    # the exceptions the doc names are read
    net = table[rank_of("facerun.net", table)]
    assert "facerun.gpu" in net["lazy"]
    assert "facerun.net" in table[rank_of("facerun.gpu.model", table)]["never"]


def test_every_module_has_a_place_in_the_doc():
    table = layers()
    # facerun/__init__.py is the public face (`facerun.load`, `Detector`, ...), each name loaded on first use
    homeless = sorted(m for m in modules() if m != "facerun" and rank_of(m, table) is None)
    assert homeless == [], "modules docs/architecture.md does not place"


def test_no_module_imports_above_its_layer():
    table, known = layers(), modules()
    wrong = []
    for module, path in sorted(known.items()):
        if module == "facerun":
            continue
        rank = rank_of(module, table)
        if rank is None:
            continue
        layer = table[rank]
        for target in sorted(imports(module, path, known)):
            there = rank_of(target, table)
            if there is None or there == rank:
                continue
            named_lazy = any(_within(target, part) for part in layer["lazy"])
            if there > rank and not named_lazy:
                wrong.append(f"{module} imports {target}: above it ({table[there]['head']})")
            elif any(_within(target, part) for part in layer["never"]):
                wrong.append(f"{module} imports {target}, which its paragraph says it never does")
            elif layer["only"] is not None and not any(_within(target, part) for part in layer["only"]):
                wrong.append(f"{module} imports {target}: its paragraph allows only {sorted(layer['only'])}")
    assert wrong == []
