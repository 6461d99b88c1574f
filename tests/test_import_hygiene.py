"""The package's imports stay layered: no cycle among rstf's modules and no underscored
name imported from another module (scripts/import_cycles.py, which reads imports at module
and function level with `ast`)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import import_cycles  # noqa: E402


def test_no_import_cycle_and_no_private_import():
    assert import_cycles.check(os.path.join(ROOT, "rstf")) == []


def test_checker_finds_a_cycle_and_a_private_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from .a import _g\n")
    (pkg / "sub" / "c.py").write_text("from ..a import thing\nfrom . import d\n")
    (pkg / "sub" / "d.py").write_text("import pkg.sub.c\n")
    (pkg / "e.py").write_text("from . import a\nimport pkg.b as bee\n\na._h()\nbee._k\n")
    found = import_cycles.check(str(pkg))
    assert "import cycle: pkg.a -> pkg.b" in found
    assert "import cycle: pkg.sub.c -> pkg.sub.d" in found
    assert any("pkg.b imports pkg.a._g" in f for f in found)
    assert any("pkg.e uses pkg.a._h" in f for f in found)
    assert any("pkg.e uses pkg.b._k" in f for f in found)
    assert len(found) == 5
