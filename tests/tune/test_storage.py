"""Opening a storage: a process that loses the race to create Optuna's schema loads it."""
from __future__ import annotations

from pathlib import Path

import pytest


def test_a_lost_schema_creation_race_is_tried_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes creating Optuna's tables on PostgreSQL at once: one gets DuplicateObject
    ('type "studydirection" already exists'), a ProgrammingError; it must load, not fail."""
    import sqlalchemy.exc

    from ppo_lstm.tune import storage as storage_module

    calls = []
    real = storage_module.RDBStorage

    def racing(url: str, **kwargs: object) -> object:
        calls.append(url)
        if len(calls) == 1:
            raise sqlalchemy.exc.ProgrammingError("CREATE TYPE studydirection", {}, Exception(
                'type "studydirection" already exists'))
        return real(url, **kwargs)

    monkeypatch.setattr(storage_module, "RDBStorage", racing)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    assert isinstance(storage_module.make_storage(url), real) and len(calls) == 2
