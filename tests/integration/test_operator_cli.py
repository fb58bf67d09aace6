"""What an operator meets at the command line and the API (INTERFACES §2, §4): usage mistakes
end as one sentence of our own with exit 1, a body that is not JSON is refused in one sentence,
tables fit the terminal and print in full when piped, and the missing pieces — ``runs list``,
run ids and honest attempts in ``jobs list``, unpriced usage, warnings for rows that can never
fire — are there.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from postroom.app.gateway import Gateway
from postroom.cli.main import app as cli_app
from postroom.config import load_config
from postroom.core.errors import ConfigError
from postroom.store.records import RunRecord
from postroom.store.sqlite import SqliteStore

from support import api_client, cli_env, eventually

runner = CliRunner()
CHAT = "telegram:group/5"
SENDER = "telegram:user/ana"


def cli(data: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    return runner.invoke(cli_app, ["--data", str(data), *args], env=cli_env(env))


def ok(data: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = cli(data, *args, env=env)
    assert result.exit_code == 0, (result.stdout, result.stderr)
    return result.stdout


def one_sentence(result: Result) -> str:
    """Exit 1 and one line of our own on stderr: no usage box, no library wording."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("error: ") and line.endswith((".", "?")), line
    for library in ("Usage:", "Try '", "Input should", "Invalid value", "Error:", "Traceback"):
        assert library not in result.stderr, result.stderr
    return line.removeprefix("error: ")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "d"
    ok(directory, "init")
    return directory


# --------------------------------------------------------------------------- usage mistakes


@pytest.mark.parametrize(
    ("args", "sentence"),
    [
        (
            ["routes", "rm", "abc"],
            "postroom routes rm: ROUTE_ID must be a whole number, not 'abc'.",
        ),
        (
            ["routes", "add", "--seq", "1"],
            "postroom routes add needs --target; see postroom routes add --help.",
        ),
        (
            ["routes", "add", "--seq", "1", "--tagret", "x"],
            "postroom routes add has no option --tagret; did you mean --target?",
        ),
        (
            ["routes", "rm", "1", "2"],
            "postroom routes rm does not take '2'; see postroom routes rm --help.",
        ),
        (["routes", "add", "--seq"], "postroom: the option --seq needs a value."),
        (
            ["jobs", "list", "--limit", "0"],
            "postroom jobs list: --limit must be at least 1, not '0'.",
        ),
        (
            ["serve", "--port", "99999"],
            "postroom serve: --port must be at most 65535, not '99999'.",
        ),
        (["frobnicate"], "postroom has no command 'frobnicate'; the commands are "),
        (
            ["folders", "show"],
            "postroom folders show needs PATH; see postroom folders show --help.",
        ),
    ],
)
def test_a_usage_mistake_is_one_sentence_and_exit_1(
    data: Path, args: list[str], sentence: str
) -> None:
    assert one_sentence(cli(data, *args)).startswith(sentence)


def test_a_group_without_a_command_shows_its_help(data: Path) -> None:
    result = cli(data, "routes")
    assert result.exit_code == 0 and "add" in result.stdout and "Usage:" in result.stdout


def test_a_bad_flag_value_is_blamed_on_the_flag_not_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, {"POSTROOM_SERVER__PORT": "8080"}, {"server": {"port": 99999}})
    message = str(caught.value)
    assert "the command-line flag --port" in message and "postroom.toml" not in message
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, {"POSTROOM_SERVER__PORT": "99999"})
    assert "environment variable POSTROOM_SERVER__PORT" in str(caught.value)


def test_routes_set_names_a_refused_row_by_its_position_and_content(
    data: Path, tmp_path: Path
) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text(
        json.dumps(
            [
                {"seq": 1, "match": "platform=telegram", "target": "main"},
                {"seq": 2, "match": "platfrom=x", "target": "main"},
            ]
        )
    )
    assert one_sentence(cli(data, "routes", "set", str(rows))).startswith(
        "Row 2 of the table (seq 2, match 'platfrom=x', target 'main'): Unknown match key "
        "'platfrom'"
    )


def test_routes_add_warns_about_a_row_that_can_never_fire_and_adds_it(data: Path) -> None:
    (catch_all,) = json.loads(ok(data, "routes", "list", "--json"))
    twin = cli(data, "routes", "add", "--seq", "5", "--match", "", "--target", "main")
    assert twin.exit_code == 0, twin.stderr
    twin_id = int(twin.stdout)
    assert twin.stderr == (
        f"warning: route {twin_id} duplicates row {catch_all['id']} (seq 9999, every message → "
        "main).\n"
    )
    late = cli(data, "routes", "add", "--seq", "20", "--match", "verb=post", "--target", "main")
    late_id = int(late.stdout)
    assert late.stderr == (
        f"warning: route {late_id} never fires: row {twin_id} (seq 5, every message → main) "
        "comes first and matches every message it would.\n"
    )
    listed = json.loads(ok(data, "routes", "list", "--json"))
    assert {r["id"] for r in listed} == {catch_all["id"], twin_id, late_id}
    added = json.loads(
        ok(
            data,
            "routes",
            "add",
            "--seq",
            "1",
            "--match",
            "platform=x",
            "--target",
            "main",
            "--json",
        )
    )
    assert added["warnings"] == []


# --------------------------------------------------------------------------- tables


def test_a_piped_table_prints_every_row_in_full_on_one_line(data: Path) -> None:
    match = "chat_jid=telegram:group/" + "9" * 90
    ok(data, "routes", "add", "--seq", "1", "--match", match, "--target", "main")
    out = ok(data, "routes", "list", env={"COLUMNS": "60"})
    (line,) = [line for line in out.splitlines() if match in line]
    assert len(line) > 100


def test_a_table_in_a_narrow_terminal_wraps_and_loses_nothing(data: Path) -> None:
    persona = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima"
    ok(data, "folders", "add", "team", "--persona", persona)
    out = ok(data, "routes", "list", env={"COLUMNS": "60", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"})
    assert all(len(line) <= 60 for line in out.splitlines()), out
    jobs = ok(
        data, "folders", "list", env={"COLUMNS": "70", "TTY_COMPATIBLE": "1", "NO_COLOR": "1"}
    )
    assert all(len(line) <= 70 for line in jobs.splitlines()), jobs
    for word in persona.split()[:6]:
        assert word in jobs, word


# --------------------------------------------------------------------------- jobs, runs, usage


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def served(data: Path) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """The server with its workers: main answers with echo, ``down`` uses a provider whose
    server is not there, and a turn gets one attempt."""
    config = data / "postroom.toml"
    config.write_text(
        config.read_text("utf-8")
        + f'\n[queue]\nmax_attempts = 1\n\n[providers.down]\nkind = "openai"\n'
        f'api_keys = ["sk-test-000000000000"]\nbase_url = "http://127.0.0.1:{_closed_port()}/v1"\n'
    )
    await asyncio.to_thread(ok, data, "folders", "add", "down", "--provider", "down")
    await asyncio.to_thread(
        ok,
        data,
        "routes",
        "add",
        "--seq",
        "1",
        "--match",
        "chat_jid=web:x/down",
        "--target",
        "down",
    )
    gateway = await Gateway.build(data, load_config(data, {}))
    await gateway.workers.start()
    try:
        async with api_client(gateway, data) as client:
            yield gateway, client
    finally:
        await gateway.workers.stop()
        await gateway.close()


async def _finished(client: httpx.AsyncClient, count: int) -> list[dict[str, Any]]:
    async def done() -> list[dict[str, Any]] | None:
        jobs = (await client.get("/api/v1/jobs")).json()["jobs"]
        finished = [j for j in jobs if j["status"] in ("done", "failed")]
        return jobs if len(finished) >= count else None

    await eventually(done, "the turns to finish")
    return (await client.get("/api/v1/jobs")).json()["jobs"]  # type: ignore[no-any-return]


async def test_jobs_list_shows_run_ids_and_no_attempts_for_a_turn_that_went_well(
    data: Path, served: tuple[Gateway, httpx.AsyncClient]
) -> None:
    _, client = served
    for chat, text in ((CHAT, "hello"), ("web:x/down", "are you there?")):
        response = await client.post(
            "/api/v1/messages", json={"chat_jid": chat, "sender": "web:u/1", "content": text}
        )
        assert response.status_code == 200, response.text
    jobs = await _finished(client, 2)
    by_folder = {j["folder"]: j for j in jobs}
    done, failed = by_folder["main"], by_folder["down"]
    assert (done["status"], failed["status"]) == ("done", "failed")
    assert len(done["run_ids"]) == 1 and len(failed["run_ids"]) == 1

    listing = json.loads(await asyncio.to_thread(ok, data, "jobs", "list", "--json"))
    assert {j["id"]: j["run_ids"] for j in listing} == {j["id"]: j["run_ids"] for j in jobs}
    table = await asyncio.to_thread(ok, data, "jobs", "list")
    (done_line,) = [line for line in table.splitlines() if line.startswith(f"│ {done['id']} ")]
    (failed_line,) = [line for line in table.splitlines() if line.startswith(f"│ {failed['id']} ")]
    assert "0/" not in done_line and "/1" not in done_line
    assert str(done["run_ids"][0]) in done_line
    assert "1/1" in failed_line
    # The error is whole, not cut at some column.
    assert failed["last_error"] and failed["last_error"] in table.replace("\n", "")

    # runs list and GET /api/v1/runs: newest first, by folder, limited.
    runs = (await client.get("/api/v1/runs")).json()["runs"]
    assert [r["id"] for r in runs] == sorted((r["id"] for r in runs), reverse=True)
    assert {r["job_id"] for r in runs} == {done["id"], failed["id"]}
    (mine,) = (await client.get("/api/v1/runs", params={"folder": "main"})).json()["runs"]
    assert (mine["folder"], mine["outcome"], mine["model"]) == ("main", "ok", "echo")
    assert set(mine) >= {"id", "job_id", "folder", "model", "usage", "cost", "outcome"}
    assert len((await client.get("/api/v1/runs", params={"limit": 1})).json()["runs"]) == 1
    assert (await client.get("/api/v1/runs", params={"limit": 0})).status_code == 400
    listed = json.loads(
        await asyncio.to_thread(ok, data, "runs", "list", "--folder", "main", "--json")
    )
    assert listed == [mine]
    text = await asyncio.to_thread(ok, data, "runs", "list")
    assert any(line.startswith(f"│ {mine['id']} ") for line in text.splitlines())


async def _insert_runs(database: Path, runs: list[RunRecord]) -> None:
    store = await SqliteStore.open(database)
    try:
        async with store.write() as tx:
            for record in runs:
                await tx.insert_run(record)
    finally:
        await store.close()


def test_usage_shows_a_model_without_a_price_as_unpriced(data: Path) -> None:
    day = (datetime.now(UTC) - timedelta(days=1)).replace(hour=12)

    def run(model: str, usage: tuple[int, int], cost: float | None) -> RunRecord:
        return RunRecord(
            job_id=1,
            folder="main",
            provider="openai",
            model=model,
            system="",
            messages=[],
            outcome="ok",
            started_at=day,
            usage={"input_tokens": usage[0], "output_tokens": usage[1]},
            cost=cost,
        )

    asyncio.run(
        _insert_runs(
            data / "postroom.db",
            [run("gpt-4o", (1000, 100), 0.0035), run("house-model", (500, 50), None)],
        )
    )
    rows = {r["model"]: r for r in json.loads(ok(data, "usage", "--json"))}
    assert rows["house-model"]["cost"] is None
    assert rows["gpt-4o"]["cost"] == 0.0035
    text = ok(data, "usage")
    (line,) = [line for line in text.splitlines() if "house-model" in line]
    assert "unpriced" in line and "0.0000" not in line
    assert "Total: 2 runs, $0.0035 and 1 run(s) of models without a price" in text
    runs = {r["model"]: r for r in json.loads(ok(data, "runs", "list", "--json"))}
    assert runs["house-model"]["cost"] is None


# --------------------------------------------------------------------------- the API


async def test_a_body_without_a_json_content_type_is_refused_in_one_sentence(
    served: tuple[Gateway, httpx.AsyncClient],
) -> None:
    _, client = served
    before = (await client.get("/api/v1/routes")).json()
    writes = [
        ("POST", "/api/v1/messages", b'{"chat_jid": "a:b", "sender": "a:c", "content": "x"}'),
        ("POST", "/api/v1/routes", b'{"seq": 5, "target": "main"}'),
        ("PUT", "/api/v1/routes", b"[]"),
        ("POST", "/api/v1/folders", b'{"path": "x"}'),
        ("PATCH", "/api/v1/folders/main", b'{"model": "m"}'),
    ]
    for method, path, body in writes:
        for headers in ({}, {"content-type": "text/plain"}):
            response = await client.request(method, path, content=body, headers=headers)
            assert response.status_code == 400, (method, path, response.text)
            sentence = response.json()["error"]
            assert sentence.startswith(
                "The body must be JSON, sent with Content-Type: application/json ("
            ), sentence
    assert (await client.get("/api/v1/routes")).json() == before
    # A write without a body needs no content type.
    assert (await client.post("/api/v1/jobs/999/retry")).status_code == 404
