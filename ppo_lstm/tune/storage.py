"""Where a study lives, and opening it from many processes at once.

``--storage`` takes a SQLAlchemy URL (``postgresql://``, ``mysql://``, ``sqlite:///FILE``) or
``journal:PATH`` (Optuna's journal file, for a shared file system); the default is
``sqlite:///<out>/study.db``. SQLite waits up to :data:`SQLITE_BUSY_TIMEOUT_S` for a lock
(several ``--jobs`` processes), so a busy database delays a process instead of failing it.

Optuna's RDBStorage makes its read-check-write updates atomic with ``SELECT ... FOR UPDATE``
(a trial moves from WAITING to RUNNING for one process only; a finished trial is never
updated again), which SQLite ignores; and SQLite's driver begins a transaction only at the
first write, after the check. Two processes could then both read a slot's trial WAITING and
both move it to RUNNING, and run the same trial at once. On SQLite every transaction of the
storage therefore begins ``IMMEDIATE`` (:func:`_serialize_sqlite`): it holds the database's
write lock from its first read, so those updates are atomic there too.

:func:`open_study` creates the study or loads it. Two processes that create the same study at
the same moment race (one may get an ``IntegrityError`` from the database, or Optuna's
``DuplicatedStudyError``; a ``CREATE TYPE`` or ``CREATE TABLE`` of Optuna's schema that the
other ran first, PostgreSQL's ``DuplicateObject``): the loser tries again and loads what the
winner created. The study records the
settings it was created with (:data:`SETTINGS_ATTR`); a later command with other settings is
refused, naming the first that differs. It also records the span of bars its trials read
(:data:`SPAN_ATTR`, none on a simulated market); a process whose files give another span is refused.
"""
from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Optional

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend

from ..config.migrate import migrate_settings_by_dest
from ..errors import UsageError, one_line

SQLITE_BUSY_TIMEOUT_S = 300
SETTINGS_ATTR = "ppo_lstm_settings"
SPAN_ATTR = "ppo_lstm_tuned_span"  # START..END: the bars the trials read (ppo_lstm.walkforward.tuned_span)
JOURNAL = "journal:"


def default_storage(out: str) -> str:
    return f"sqlite:///{Path(out).resolve() / 'study.db'}"


def shown_url(url: str) -> str:
    """``url`` with its password hidden (for messages)."""
    if url.startswith(JOURNAL):
        return url
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - a URL SQLAlchemy cannot parse is shown as typed
        return url


def make_storage(url: str) -> BaseStorage:
    """The Optuna storage at ``url``; UsageError (one line) when it cannot be reached or used."""
    if url.startswith(JOURNAL):
        path = url[len(JOURNAL):]
        if not path:
            raise UsageError("--storage journal:PATH needs a file path after 'journal:'")
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(path))
        except OSError as err:
            raise UsageError(f"--storage {url}: cannot open the journal file ({one_line(err)})") from None
    if not url.split(":", 1)[0].split("+", 1)[0] in ("sqlite", "postgresql", "mysql"):
        raise UsageError(f"--storage {shown_url(url)}: not a storage; use postgresql://..., mysql://..., "
                         f"sqlite:///FILE or journal:PATH")
    engine: dict[str, Any] = {"pool_pre_ping": True}
    if url.startswith("sqlite"):
        engine["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S}
        return _retry(lambda: _serialize_sqlite(RDBStorage(url, engine_kwargs=engine)), url)
    return _retry(lambda: RDBStorage(url, engine_kwargs=engine), url)


def _serialize_sqlite(storage: RDBStorage) -> RDBStorage:
    """Begin each of ``storage``'s transactions with ``BEGIN IMMEDIATE`` (SQLAlchemy's recipe for
    pysqlite: the driver's own implicit BEGIN is turned off), so a transaction that reads a
    trial's state before updating it holds the write lock from that read on."""
    from sqlalchemy import event

    @event.listens_for(storage.engine, "connect")
    def _no_driver_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(storage.engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    storage.engine.dispose()  # the connections Optuna opened to create its tables predate the listeners
    return storage


def _retry(make: Any, url: str, attempts: int = 8) -> Any:
    """``make()``, again after a short random pause when a concurrent creator won a race
    (IntegrityError, DuplicatedStudyError); UsageError for an unreachable or unusable storage."""
    import sqlalchemy.exc

    for attempt in range(attempts):
        try:
            return make()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError,
                optuna.exceptions.DuplicatedStudyError) as err:
            lost_race = not isinstance(err, sqlalchemy.exc.ProgrammingError) or "already exists" in str(err)
            if not lost_race:
                raise UsageError(f"--storage {shown_url(url)}: {one_line(err, 200)}") from None
            if attempt == attempts - 1:
                raise
            time.sleep(0.1 + random.random() * 0.4)
        except (sqlalchemy.exc.SQLAlchemyError, ModuleNotFoundError, ImportError, OSError) as err:
            raise UsageError(f"--storage {shown_url(url)}: cannot reach the storage ({one_line(err, 200)})") from None
        except ValueError as err:  # e.g. a malformed URL
            raise UsageError(f"--storage {shown_url(url)}: {one_line(err, 200)}") from None
    raise AssertionError("unreachable")


def open_study(storage: BaseStorage, name: str, url: str) -> tuple[optuna.Study, bool]:
    """The study ``name`` in ``storage`` (maximised), created when it does not exist. Returns it
    and whether this call created it (exactly one of several racing processes does)."""
    def create() -> tuple[optuna.Study, bool]:
        try:
            return optuna.create_study(storage=storage, study_name=name, direction="maximize"), True
        except optuna.exceptions.DuplicatedStudyError:
            return optuna.load_study(storage=storage, study_name=name), False
    return _retry(create, url)


def load_existing(storage: BaseStorage, name: str, url: str) -> optuna.Study:
    """The existing study ``name``; UsageError naming the studies there when it is not."""
    try:
        return optuna.load_study(storage=storage, study_name=name)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        raise UsageError(f"{shown_url(url)} holds no study '{name}' (it holds: {', '.join(names) or 'none'})") \
            from None


def record_settings(study: optuna.Study, settings: dict[str, Any]) -> None:
    study.set_user_attr(SETTINGS_ATTR, json.loads(json.dumps(settings)))


def wait_for_settings(study: optuna.Study, timeout: float = 60.0) -> Optional[dict[str, Any]]:
    """The settings the study's creator recorded, waiting up to ``timeout`` s for a creator
    that is still writing them; None if it never did (it was killed)."""
    deadline = time.monotonic() + timeout
    while True:
        found = study.user_attrs.get(SETTINGS_ATTR)
        if found is not None or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def check_settings(name: str, recorded: dict[str, Any], settings: dict[str, Any],
                   sampled: frozenset[str] = frozenset()) -> None:
    """UsageError naming the first setting that differs from those the study was created with.
    A setting the study's version did not record reads as what its trials trained with
    (:func:`~ppo_lstm.config.migrate.migrate_settings_by_dest`). The base settings in ``sampled``
    (dests the space samples) are not compared: every trial sets them, so their base
    values reach no trial (a default changed since the study began does not refuse it)."""
    base, version = recorded.get("base"), recorded.get("settings_format")
    recorded = {k: v for k, v in recorded.items() if k != "settings_format"}
    if isinstance(base, dict):
        recorded["base"] = _without(migrate_settings_by_dest(base, version, f"study '{name}'"), sampled)
    settings = {k: v for k, v in json.loads(json.dumps(settings)).items() if k != "settings_format"}
    if isinstance(settings.get("base"), dict):
        settings["base"] = _without(settings["base"], sampled)
    for key in sorted(set(recorded) | set(settings)):
        old, new = recorded.get(key), settings.get(key)
        if old == new:
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            inner = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))[0]
            old, new, key = old.get(inner), new.get(inner), f"{key} {inner}"
        raise UsageError(f"study '{name}' was created with {key} = {json.dumps(old)}, this command gives "
                         f"{json.dumps(new)}; keep the study's settings, or start another study (--study-name)")


def _without(values: dict[str, Any], keys: frozenset[str]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in keys}


def record_span(study: optuna.Study, span: Optional[str]) -> None:
    """Record ``START..END``, the bars the study's trials read (nothing on a simulated market)."""
    if span is not None:
        study.set_user_attr(SPAN_ATTR, span)


def check_span(study: optuna.Study, span: Optional[str]) -> None:
    """UsageError when the study read other bars than ``span`` (the same flags, files that
    differ); a study that recorded none (made before spans were recorded) records it."""
    recorded = study.user_attrs.get(SPAN_ATTR)
    if recorded is None:
        record_span(study, span)
    elif recorded != span:
        raise UsageError(f"study '{study.study_name}' tuned on the bars {recorded}, this command's data gives "
                         f"{span or 'a simulated market'}: its files differ from the study's; give every process "
                         f"the same files, or start another study (--study-name)")
