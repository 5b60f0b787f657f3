"""The package's metadata has one source, pyproject.toml: the in-tree build
backend writes every field of [project] into the wheel and the sdist, and
baton.__version__ is the same version. And the code stays within the
Python versions it declares."""

from __future__ import annotations

import ast
import email.parser
import importlib.util
import os
import re
import tarfile
import tempfile
import unittest
import zipfile

from support import PACKAGE_DIR

import baton

try:
    import tomllib
except ImportError:  # Python before 3.11
    tomllib = None  # type: ignore[assignment]


def load_backend():
    spec = importlib.util.spec_from_file_location("baton_build_backend", os.path.join(PACKAGE_DIR, "_build", "backend.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@unittest.skipIf(tomllib is None, "SKIPPED: tomllib needs Python 3.11")
class TestMetadata(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        with open(os.path.join(PACKAGE_DIR, "pyproject.toml"), "rb") as f:
            cls.project = tomllib.load(f)["project"]
        cls.backend = load_backend()

    def check(self, raw: str) -> None:
        p = self.project
        msg = email.parser.Parser().parsestr(raw)
        self.assertEqual(msg["Name"], p["name"])
        self.assertEqual(msg["Version"], p["version"])
        self.assertEqual(msg["Summary"], p["description"])
        self.assertEqual(msg["Requires-Python"], p["requires-python"])
        self.assertEqual(msg.get_all("Classifier"), p["classifiers"])
        self.assertEqual(msg.get_all("Project-URL"), [f"{k}, {v}" for k, v in p["urls"].items()])
        self.assertIn("Typing :: Typed", p["classifiers"])
        self.assertTrue({"Homepage", "Source", "Issues", "Documentation"} <= set(p["urls"]))
        with open(os.path.join(PACKAGE_DIR, p["readme"]), encoding="utf-8") as f:
            self.assertEqual(msg.get_payload(), f.read())

    def test_wheel(self) -> None:
        d = tempfile.mkdtemp(prefix="baton-py-wheel-")
        name = self.backend.build_wheel(d)
        self.assertEqual(name, f"baton_client-{self.project['version']}-py3-none-any.whl")
        with zipfile.ZipFile(os.path.join(d, name)) as z:
            di = f"baton_client-{self.project['version']}.dist-info"
            self.check(z.read(f"{di}/METADATA").decode())
            self.assertIn("baton/py.typed", z.namelist())

    def test_sdist(self) -> None:
        d = tempfile.mkdtemp(prefix="baton-py-sdist-")
        name = self.backend.build_sdist(d)
        with tarfile.open(os.path.join(d, name)) as t:
            member = t.extractfile(f"baton_client-{self.project['version']}/PKG-INFO")
            assert member is not None
            self.check(member.read().decode())

    def test_version_has_one_source(self) -> None:
        self.assertEqual(baton.__version__, self.project["version"])
        for path in (os.path.join(PACKAGE_DIR, "baton", "__init__.py"), os.path.join(PACKAGE_DIR, "_build", "backend.py")):
            with open(path, encoding="utf-8") as f:
                self.assertIsNone(re.search(r"""(?m)^\s*(__version__|VERSION)\s*=\s*["']""", f.read()),
                                  f"{path} spells out a version of its own")


class TestPythonVersions(unittest.TestCase):
    def test_syntax_of_the_oldest_declared_python(self) -> None:
        """Every module parses as Python 3.9 (requires-python)."""
        base = os.path.join(PACKAGE_DIR, "baton")
        for name in sorted(os.listdir(base)):
            if name.endswith(".py"):
                with self.subTest(name), open(os.path.join(base, name), encoding="utf-8") as f:
                    ast.parse(f.read(), filename=name, feature_version=(3, 9))


def package_imports() -> "dict[str, tuple[set[str], list[str]]]":
    """Each module of the package: the package's modules it imports
    (TYPE_CHECKING blocks included: a cycle there is a cycle a reader and
    a type checker must follow), and the imports that stand inside a
    function, as "module:line"."""
    base = os.path.join(PACKAGE_DIR, "baton")
    modules = {n[:-3] for n in os.listdir(base) if n.endswith(".py")}
    out: "dict[str, tuple[set[str], list[str]]]" = {}
    for mod in sorted(modules):
        with open(os.path.join(base, mod + ".py"), encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=mod)
        deps: "set[str]" = set()
        inside: "list[str]" = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside += [f"{mod}:{n.lineno}" for n in ast.walk(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = [node.module] if node.module else [a.name for a in node.names]
                deps |= {n for n in names if n in modules}
        out[mod] = (deps - {mod}, inside)
    return out


class TestImports(unittest.TestCase):
    """The package's modules import one way (client imports many and
    election, all three import held), at the top of each module."""

    def test_no_cycle(self) -> None:
        graph = {m: deps for m, (deps, _) in package_imports().items()}
        done: "set[str]" = set()

        def visit(mod: str, path: "list[str]") -> None:
            if mod in path:
                self.fail("import cycle: " + " -> ".join(path[path.index(mod):] + [mod]))
            if mod in done:
                return
            for dep in sorted(graph[mod]):
                visit(dep, path + [mod])
            done.add(mod)

        for mod in sorted(graph):
            visit(mod, [])

    def test_no_import_inside_a_function(self) -> None:
        inside = [where for _, (_, w) in sorted(package_imports().items()) for where in w]
        self.assertEqual(inside, [], "imports inside functions")


class TestInstallsWithNoIndex(unittest.TestCase):
    """Python 3.9 and 3.10 have no tomllib: the backend must read
    pyproject.toml without asking the installer for tomli (which needs a
    package index). Its own reader must see what tomllib sees."""

    def test_no_build_requirements(self) -> None:
        backend = load_backend()
        for hook in ("get_requires_for_build_wheel", "get_requires_for_build_sdist", "get_requires_for_build_editable"):
            self.assertEqual(getattr(backend, hook)(), [], hook)

    @unittest.skipIf(tomllib is None, "needs tomllib (Python 3.11+) to compare with")
    def test_own_reader_agrees_with_tomllib(self) -> None:
        backend = load_backend()
        with open(os.path.join(PACKAGE_DIR, "pyproject.toml"), "rb") as f:
            data = f.read()
        self.assertEqual(backend.read_toml(data.decode("utf-8")), tomllib.loads(data.decode("utf-8")))

    def test_backend_parses_as_the_oldest_declared_python(self) -> None:
        with open(os.path.join(PACKAGE_DIR, "_build", "backend.py"), encoding="utf-8") as f:
            ast.parse(f.read(), filename="backend.py", feature_version=(3, 9))


if __name__ == "__main__":
    unittest.main()
