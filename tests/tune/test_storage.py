"""Opening a storage: a process that loses the race to create Optuna's schema loads it; the
span of bars a study read is recorded once and every process that joins must read the same."""
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


def test_a_process_whose_files_give_other_bars_is_refused(tmp_path: Path) -> None:
    from ppo_lstm.errors import UsageError
    from ppo_lstm.tune.storage import SPAN_ATTR, check_span, make_storage, open_study, record_span

    url = f"sqlite:///{tmp_path / 'study.db'}"
    study, _ = open_study(make_storage(url), "tune", url)
    check_span(study, "2010-01-04T00:00:00..2018-12-31T00:00:00")  # a study made before spans: this one is recorded
    assert study.user_attrs[SPAN_ATTR] == "2010-01-04T00:00:00..2018-12-31T00:00:00"
    check_span(study, "2010-01-04T00:00:00..2018-12-31T00:00:00")
    with pytest.raises(UsageError, match=r"study 'tune' tuned on the bars 2010-01-04T00:00:00..2018-12-31T00:00:00, "
                                         r"this command's data gives 2010-01-04T00:00:00..2019-01-02T00:00:00: its "
                                         r"files differ"):
        check_span(study, "2010-01-04T00:00:00..2019-01-02T00:00:00")
    record_span(study, None)  # a simulated market records nothing
    assert study.user_attrs[SPAN_ATTR] == "2010-01-04T00:00:00..2018-12-31T00:00:00"
