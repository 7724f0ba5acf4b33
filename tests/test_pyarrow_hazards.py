"""README.md's table of pyarrow's hazards on device data states what pyarrow does.

Every operation of tests/_pyarrow_hazards.py runs on device data in a child process (on the
simulator in CI, on the GPU in scripts/gpu-test); the outcome must be the one the README's
table gives for it, so the table cannot drift from pyarrow as pyarrow changes.
"""

import re
from pathlib import Path

import pytest

import _pyarrow_hazards

README = Path(__file__).resolve().parent.parent / "README.md"
MARKER = "<!-- hazard table: checked by tests/test_pyarrow_hazards.py -->"
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \|")


def readme_outcomes() -> dict:
    """{operation: outcome} as the README's table states them."""
    text = README.read_text()
    assert MARKER in text, "the README lost its hazard table's marker"
    table = text[text.index(MARKER):].split("\n\n")[0]
    return {match.group(1): match.group(2) for match in map(ROW.match, table.splitlines())
            if match}


@pytest.fixture(scope="module")
def observed():
    return _pyarrow_hazards.observe()


def test_the_table_lists_every_probed_operation():
    assert list(readme_outcomes()) == list(_pyarrow_hazards.OPERATIONS)


@pytest.mark.parametrize("operation", list(_pyarrow_hazards.OPERATIONS))
def test_pyarrow_does_what_the_readme_says(operation, observed):
    assert observed[operation] == readme_outcomes()[operation], (
        f"pyarrow's outcome of `{operation}` on device data changed: update README.md's "
        "hazard table (python tests/_pyarrow_hazards.py prints it)")
