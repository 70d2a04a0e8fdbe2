"""Suite-wide: nothing a test runs writes outside its temporary folders."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The runtime check caches its SGLang source analysis
    # (moonpin.preflight.installed.sources); children inherit the environment, so each test
    # gets its own cache folder.
    monkeypatch.setenv("MOONPIN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    # A user KB (`moonpin scrape` on an installed moonpin) is read when newer than the
    # shipped one: each test gets an empty data folder, so none of the user's is read.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("data")))
    # The shipped KB grows old as the calendar moves: outputs judged on it must not change
    # with today's date (tests of the age note set their own limit).
    monkeypatch.setenv("MOONPIN_KB_MAX_AGE_DAYS", "0")
