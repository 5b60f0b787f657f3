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
