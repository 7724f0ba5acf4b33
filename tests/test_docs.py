"""The documentation runs as written: every Python block of README.md and of the user guide
(docs/), and the examples in the docstrings of every module, the compiled one included.

Blocks are self-contained programs, each run in a fresh interpreter. A block whose first
lines say ``# needs: gpu`` (or ``cupy``, ``torch``...) runs only where that is present; a
block that starts ``# name.py (started by ...)`` is a file another block of the same page
runs: it is saved under that name next to the blocks instead of being run itself. A line
that prints and whose comment is a value (``print(rows)  # 100000``) must print that value.
"""

import ast
import os
import doctest
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import arrow_gpu

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
NEEDS = re.compile(r"^# needs: ([^(\n]+)", re.MULTILINE)  # "(why)" may follow
SAVED_FILE = re.compile(r"^# (\S+\.py) \(started by .*\)$")


def blocks(document=None):
    """(document, line, code) of every Python block, of one document or of all."""
    for path in [document] if document else DOCUMENTS:
        text = path.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield path, line, match.group(1)


def saved_files(document):
    """The blocks of ``document`` that are files for its other blocks, by file name."""
    files = {}
    for _, _, code in blocks(document):
        saved = SAVED_FILE.match(code.splitlines()[0])
        if saved:
            files[saved.group(1)] = code
    return files


# A line whose comment shows a value ("x.to_pylist()   # [2, 3, 4, 5]"): the block claims to
# print it. NumPy prints arrays without commas ("[0 1 2 3]").
VALUE_COMMENT = re.compile(r"^\s*(?P<code>\S.*?)\s+# (?P<value>.+?)\s*$")
NUMPY_ARRAY = re.compile(r"^\[[-\d. ]+\]$")


def shown_values(code):
    """(line of code, value) for every line whose comment is a value the block shows."""
    for line in code.splitlines():
        match = VALUE_COMMENT.match(line)
        if match is None:
            continue
        value = match.group("value")
        try:
            ast.literal_eval(value)
        except (ValueError, SyntaxError):
            if not NUMPY_ARRAY.match(value):
                continue  # a comment in words
        yield match.group("code"), value


def runnable_blocks():
    for path, line, code in blocks():
        if SAVED_FILE.match(code.splitlines()[0]):
            continue
        needs = {need.strip() for found in NEEDS.findall(code) for need in found.split(",")}
        marks = [pytest.mark.gpu] if "gpu" in needs else []
        yield pytest.param(path, code, needs - {"gpu"}, marks=marks,
                           id=f"{path.relative_to(ROOT)}:{line}")


def test_the_documents_have_blocks_to_run():
    assert len(list(blocks(README))) >= 1
    assert len(list(runnable_blocks())) >= 12


def test_values_in_comments_are_printed():
    # A bare expression shows its value in a REPL only; a block runs as a script.
    unprinted = [(path.name, line, code) for path, line, block in blocks()
                 for code, _ in shown_values(block) if not code.startswith("print(")]
    assert not unprinted, f"values shown in comments that the blocks never print: {unprinted}"


# Printed after each line that claims a value, so that what that line printed is known.
CLAIM = "\x00claim {}"


def with_claim_markers(code):
    """``code`` with a marker printed after each line whose comment claims a printed value,
    and the values claimed, in the order of the markers."""
    lines, claims = [], []
    for line in code.splitlines():
        for printing, value in shown_values(line):
            if printing.startswith("print("):
                indent = line[:len(line) - len(line.lstrip())]
                line = f"{indent}{printing}; print({CLAIM.format(len(claims))!r})"
                claims.append(value)
        lines.append(line)
    return "\n".join(lines) + "\n", claims


def claimed_lines(stdout, claims):
    """[(claimed, printed)] for each claim: the line printed just before its marker."""
    printed, previous = {}, None
    for line in stdout.splitlines():
        if line.startswith("\x00claim "):
            printed[int(line.split()[1])] = previous
        previous = line
    return [(value, printed.get(index, "<never printed>")) for index, value in enumerate(claims)]


def test_a_claim_is_held_to_its_own_line():
    code, claims = with_claim_markers("print(1 + 1)  # 2\nprint('x')\nprint(False)  # True\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert claimed_lines(result.stdout, claims) == [("2", "2"), ("True", "False")]


@pytest.mark.parametrize(("document", "code", "modules"), list(runnable_blocks()))
def test_block_runs_as_written(document, code, modules, tmp_path):
    for module in sorted(modules):
        pytest.importorskip(module)
    for name, saved in saved_files(document).items():
        (tmp_path / name).write_text(saved)
    marked, claims = with_claim_markers(code)
    (tmp_path / "block.py").write_text(marked)
    result = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    wrong = [(value, printed) for value, printed in claimed_lines(result.stdout, claims)
             if printed != value]
    assert not wrong, f"lines printed other than their comments say (said, printed): {wrong}"


# Numba's simulator has no External Memory Management, which this module plugs into.
GPU_ONLY_MODULES = {"arrow_gpu.numba_memory"}


def package_modules():
    names = [arrow_gpu.__name__] + [
        info.name for info in pkgutil.walk_packages(arrow_gpu.__path__, "arrow_gpu.")]
    for name in sorted(names):
        marks = [pytest.mark.gpu] if name in GPU_ONLY_MODULES else []
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(package_modules()))
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in finder.find(module, name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0


def test_the_compiled_module_has_examples():
    # Its docstrings are found through the module like any other's; make sure they are.
    examples = sum(len(test.examples) for test in doctest.DocTestFinder().find(arrow_gpu._cuda))
    assert examples >= 40


def declared_extras():
    """The extras pyproject.toml declares (read as text: tomllib is Python 3.11+)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]")[1].split("\n[")[0]
    return re.findall(r"^([a-z0-9-]+) = \[", section, re.MULTILINE)


@pytest.mark.parametrize("document", [README, ROOT / "docs" / "guide" / "install.md"],
                         ids=lambda path: path.name)
def test_the_extras_table_lists_every_extra(document):
    table = re.findall(r"^\| `arrow_gpu\[([a-z0-9-]+)\]` \|", document.read_text(), re.MULTILINE)
    assert sorted(table) == sorted(declared_extras())


# The libraries whose types are partial or missing (as pyproject.toml's mypy overrides):
# Any to the check, so that only arrow_gpu's own types are held to the blocks.
UNTYPED_FOR_BLOCKS = """\
[mypy]
python_version = 3.10
check_untyped_defs = True
ignore_missing_imports = True
[mypy-pyarrow.*,numba.*,tqdm.*]
follow_imports = skip
"""


def test_blocks_type_check(tmp_path):
    # Each block as a module of its own, checked in one mypy run against this checkout's
    # arrow_gpu: read_parquet(path).num_rows must check, as the guide writes it. mypy comes
    # with the [test] extra; a GPU machine set up otherwise may lack it.
    pytest.importorskip("mypy")
    names = []
    for index, (_, _, code) in enumerate(blocks()):
        if not SAVED_FILE.match(code.splitlines()[0]):
            (tmp_path / f"block_{index}.py").write_text(code)
            names.append(f"block_{index}.py")
    (tmp_path / "mypy.ini").write_text(UNTYPED_FOR_BLOCKS)
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary", "--config-file=mypy.ini",
         "--cache-dir", str(tmp_path / ".mypy_cache"), *names],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env={**os.environ, "MYPYPATH": str(ROOT)})
    assert result.returncode == 0, result.stdout + result.stderr
