#!/usr/bin/env python3
"""Checks python/ragfind/_core.pyi against the compiled module ragfind._core.

Two passes, both against the module that `import ragfind._core` finds (the developer build in
python/ragfind with PYTHONPATH=python, or the installed wheel):

1. mypy's stubtest: every public name exists on both sides with the same kind (class, function,
   method, staticmethod, property), classes have the same bases. stubtest cannot read the
   signatures of pybind11 functions (they have no __text_signature__), so it skips parameters.
2. Parameters: mypy's stubgen reads each function's pybind11 docstring signature; this script
   compares every function's parameter names, order, kinds (positional-only, keyword-only, *args)
   and which ones have defaults with the committed stub, and each default the stub spells out
   with the one in the docstring. Types are not compared: the stub's are narrower on purpose
   (the binding takes `object` and checks at run time).

Usage:
    PYTHONPATH=python python tools/check_stubs.py          # exit 1 and a list of mismatches
    PYTHONPATH=python python tools/check_stubs.py --generated build/stubs
        # also writes stubgen's version of the stub there, to copy signatures from when re-syncing

Entries stubtest cannot judge go in tools/stubtest_allowlist.txt, each with the reason.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULE = "ragfind._core"
ALLOWLIST = ROOT / "tools" / "stubtest_allowlist.txt"


def run_stubtest(stub_dir: Path) -> list[str]:
    """stubtest's errors, one concise line each (empty when it passes)."""
    cmd = [sys.executable, "-m", "mypy.stubtest", MODULE, "--concise"]
    if ALLOWLIST.exists():
        cmd += ["--allowlist", str(ALLOWLIST)]
    env = dict(os.environ)
    # stubtest reads the stub from MYPYPATH (the package folder holding _core.pyi) and imports the
    # runtime module from sys.path as usual.
    env["MYPYPATH"] = str(stub_dir)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode == 0:
        return []
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    return lines or [f"stubtest exited {proc.returncode} without output"]


def generate_stub(out_dir: Path) -> Path:
    """Runs stubgen on the compiled module; returns the generated _core.pyi."""
    # mypy's compiled wheels cannot run stubgen with -m; call its main() instead.
    code = "import sys; from mypy.stubgen import main; main(sys.argv[1:])"
    cmd = [sys.executable, "-c", code, "-m", MODULE, "-o", str(out_dir), "--quiet"]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out_dir / "ragfind" / "_core.pyi"


def signatures(path: Path) -> dict[str, tuple[str, str]]:
    """qualified name -> (comparable parameter shape, readable form) for every def in a stub."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, tuple[str, str]] = {}

    def shape(fn: ast.FunctionDef) -> tuple[str, str]:
        a = fn.args
        parts: list[str] = []
        positional = a.posonlyargs + a.args
        n_plain_defaults = len(a.defaults)
        for i, arg in enumerate(positional):
            has_default = i >= len(positional) - n_plain_defaults
            parts.append(arg.arg + ("=..." if has_default else ""))
            if a.posonlyargs and i == len(a.posonlyargs) - 1:
                parts.append("/")
        if a.vararg:
            parts.append("*" + a.vararg.arg)
        elif a.kwonlyargs:
            parts.append("*")
        for arg, default in zip(a.kwonlyargs, a.kw_defaults):
            parts.append(arg.arg + ("=..." if default is not None else ""))
        if a.kwarg:
            parts.append("**" + a.kwarg.arg)
        decorators = [ast.unparse(d) for d in fn.decorator_list]
        kind = "@staticmethod " if "staticmethod" in decorators else ""
        if "property" in decorators or any(d.endswith(".setter") for d in decorators):
            kind += "@property "
        text = f"{kind}({', '.join(parts)})"
        return text, text

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef):
                name = prefix + node.name
                if any(ast.unparse(d).split(".")[-1] == "overload" for d in node.decorator_list):
                    name += f"#{sum(1 for k in out if k.split('#')[0] == name)}"
                out[name] = shape(node)

    visit(tree.body, "")
    return out


def compare_parameters(stub: Path, generated: Path) -> list[str]:
    have = signatures(stub)
    want = signatures(generated)
    errors = []
    for name in sorted(set(have) & set(want)):
        if have[name][0] != want[name][0]:
            errors.append(
                f"{MODULE}.{name}: parameters differ\n"
                f"    stub:    {have[name][1]}\n    runtime: {want[name][1]}"
            )
    return errors


def stub_defaults(path: Path) -> dict[str, dict[str, str]]:
    """qualified name -> {parameter: default source} for the stub's non-`...` defaults."""
    out: dict[str, dict[str, str]] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body, prefix + node.name + ".")
            elif isinstance(node, ast.FunctionDef):
                a = node.args
                pos = a.posonlyargs + a.args
                pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults))
                pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
                given = {k.arg: ast.unparse(d) for k, d in pairs if ast.unparse(d) != "..."}
                if given:
                    out[prefix + node.name] = given

    visit(ast.parse(path.read_text()).body, "")
    return out


def runtime_defaults(obj: object) -> dict[str, str] | None:
    """{parameter: default source} from a pybind11 docstring's first signature line, or None."""
    doc = getattr(obj, "__doc__", None) or ""
    first = doc.strip().splitlines()[0] if doc.strip() else ""
    name = getattr(obj, "__name__", "")
    if not first.startswith(name + "("):
        return None  # overloaded, or not a pybind11 signature
    head = first.rsplit(" -> ", 1)[0]
    try:
        fn = ast.parse(f"def {head}: ...").body[0]
    except SyntaxError:
        return None  # a default pybind11 could only print as <... object at 0x...>
    assert isinstance(fn, ast.FunctionDef)
    a = fn.args
    pos = a.posonlyargs + a.args
    pairs = list(zip(pos[len(pos) - len(a.defaults) :], a.defaults))
    pairs += [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    return {k.arg: ast.unparse(d) for k, d in pairs}


def compare_defaults(stub: Path, module: object) -> list[str]:
    errors = []
    for name, given in sorted(stub_defaults(stub).items()):
        obj: object = module
        for part in name.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        actual = runtime_defaults(obj)
        if actual is None:
            continue
        for param, text in sorted(given.items()):
            if param not in actual:
                continue  # a missing default is reported by compare_parameters
            try:
                same = ast.literal_eval(text) == ast.literal_eval(actual[param])
            except ValueError:
                same = text == actual[param]
            if not same:
                errors.append(
                    f"{MODULE}.{name}: default of {param} is {text} in the stub, {actual[param]} at run time"
                )
    return errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stub", type=Path, default=ROOT / "python" / "ragfind" / "_core.pyi")
    parser.add_argument("--generated", type=Path, help="folder to write stubgen's stub into (kept)")
    args = parser.parse_args()

    try:
        import mypy.stubtest  # noqa: F401
    except ImportError:
        print("check_stubs: mypy is not installed (pip install mypy, or the [test] extra)", file=sys.stderr)
        return 2
    try:
        import ragfind._core as core  # noqa: F401
    except ImportError as e:
        print(f"check_stubs: cannot import {MODULE} ({e}); build it first (CONTRIBUTING.md)", file=sys.stderr)
        return 2
    stub_name = args.stub.resolve()
    if stub_name.is_relative_to(ROOT):
        stub_name = stub_name.relative_to(ROOT)
    print(f"check_stubs: {stub_name} against {core.__file__}", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        # stubtest needs the stub inside a package folder of its own: a copy of python/ragfind's
        # stub files only, so the runtime import still comes from sys.path.
        pkg = Path(tmp) / "stubs" / "ragfind"
        pkg.mkdir(parents=True)
        (pkg / "__init__.pyi").write_text("")
        (pkg / "_core.pyi").write_text(args.stub.read_text())
        problems = run_stubtest(pkg.parent)
        gen_dir = args.generated if args.generated else Path(tmp) / "gen"
        generated = generate_stub(gen_dir)
        problems += compare_parameters(args.stub, generated)
        problems += compare_defaults(args.stub, core)
        if args.generated:
            print(f"check_stubs: stubgen's stub written to {generated}")

    if problems:
        print(f"\n{len(problems)} mismatch(es) between the stub and the module:\n")
        for p in problems:
            print(p)
        print(
            "\nFix python/ragfind/_core.pyi (rerun with --generated build/stubs for stubgen's signatures"
            f" to copy); what stubtest cannot judge goes in {ALLOWLIST.relative_to(ROOT)} with its reason."
        )
        return 1
    print("check_stubs: the stub matches the module (stubtest; every function's parameters and defaults)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
