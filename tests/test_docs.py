"""The documentation runs as written: every Python block of README.md, and the examples in the
docstrings of every module, the compiled one included.

README blocks are self-contained programs, each run in a fresh interpreter. A block whose
first lines say ``# needs: gpu`` (or ``cupy``, ``torch``...) runs only where that is present;
a block that starts ``# name.py (started by ...)`` is a file another block runs: it is saved
under that name next to the blocks instead of being run itself.
"""

import ast
import doctest
import importlib
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

import arrow_gpu

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
NEEDS = re.compile(r"^# needs: ([^(\n]+)", re.MULTILINE)  # "(why)" may follow
SAVED_FILE = re.compile(r"^# (\S+\.py) \(started by .*\)$")


def readme_blocks():
    text = README.read_text()
    for match in BLOCK.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        yield line, match.group(1)


def saved_files():
    """The blocks that are files for other blocks, by file name."""
    files = {}
    for _, code in readme_blocks():
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
    for line, code in readme_blocks():
        if SAVED_FILE.match(code.splitlines()[0]):
            continue
        needs = {need.strip() for found in NEEDS.findall(code) for need in found.split(",")}
        marks = [pytest.mark.gpu] if "gpu" in needs else []
        yield pytest.param(code, needs - {"gpu"}, marks=marks, id=f"README.md:{line}")


def test_the_readme_has_blocks_to_run():
    assert len(list(runnable_blocks())) >= 8


def test_values_in_readme_comments_are_printed():
    # A bare expression shows its value in a REPL only; a block runs as a script.
    unprinted = [(line, code) for line, block in readme_blocks()
                 for code, _ in shown_values(block) if not code.startswith("print(")]
    assert not unprinted, f"values shown in comments that the blocks never print: {unprinted}"


@pytest.mark.parametrize(("code", "modules"), list(runnable_blocks()))
def test_readme_block_runs_as_written(code, modules, tmp_path):
    for module in sorted(modules):
        pytest.importorskip(module)
    for name, saved in saved_files().items():
        (tmp_path / name).write_text(saved)
    (tmp_path / "block.py").write_text(code)
    result = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    printed = result.stdout.splitlines()
    for line, value in shown_values(code):
        assert value in printed, f"{line} printed {printed}, not {value} as its comment says"


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
