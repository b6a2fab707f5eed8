import sys
from pathlib import Path

# Test helpers (fixture_support) live beside the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """`fuzz` tests (the large seeded robustness run) are opt-in: they run only when the `-m`
    expression names them (`python -m pytest -m fuzz`)."""
    import pytest

    if "fuzz" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="large seeded run: opt in with `python -m pytest -m fuzz`")
    for item in items:
        if "fuzz" in item.keywords:
            item.add_marker(skip)
