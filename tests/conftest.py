import sys
from pathlib import Path

import pytest

# Test helpers (fixture_support) live beside the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))


def pytest_collection_modifyitems(config, items):
    """`fuzz` tests (the large seeded robustness run) are opt-in: they run only when the `-m`
    expression names them (`python -m pytest -m fuzz`)."""
    if "fuzz" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="large seeded run: opt in with `python -m pytest -m fuzz`")
    for item in items:
        if "fuzz" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cache_outside_the_repository(tmp_path_factory, monkeypatch):
    """Every test gets its own empty cache folder, outside the repository and outside its own
    tmp_path (which some tests list): no test sees another's entries, and no run leaves a
    .trainlint_cache folder in the checkout. Tests of the default location unset the variable."""
    monkeypatch.setenv("TRAINLINT_CACHE_DIR", str(tmp_path_factory.mktemp("trainlint-cache")))


@pytest.fixture
def register_rule(monkeypatch):
    """register_rule(RuleClass): the registry holds that rule too, for this test (and the
    stored catalog, which describes the rules on disk only, is not used)."""
    from trainlint import rules as registry

    def register(rule):
        with_rule = {**registry.all_rules(), rule.code: rule}
        monkeypatch.setattr(registry, "_discover", lambda: with_rule)
        monkeypatch.setattr(registry.catalog, "stored", lambda: None)

    return register


@pytest.fixture
def checked_here(monkeypatch):
    """The display paths the runner checked in this process (not found in the cache, not
    checked by a worker), in order."""
    from trainlint import runner

    seen = []
    real = runner.check_source

    def recording(source, selection):
        seen.append(source.path)
        return real(source, selection)

    monkeypatch.setattr(runner, "check_source", recording)
    return seen
