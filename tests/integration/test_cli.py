"""The ``postroom`` command line, driven for real (INTERFACES §1-§3, ROUTING §2, §7).

Most tests use Typer's ``CliRunner`` against ``postroom.cli.main.app`` (fast, stdout and stderr
captured apart); a few run ``python -m postroom`` in a subprocess to check exit codes, stream
separation and the absence of tracebacks end to end. Every test works in its own data directory.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from postroom.cli.main import app

DECISION_KEYS = {
    "action",
    "layer",
    "folder",
    "topic",
    "content",
    "inline",
    "route_id",
    "ack",
    "job_id",
    "reason",
}
ROUTE_KEYS = {
    "id",
    "seq",
    "match",
    "target",
    "mode",
    "fires_on",
    "shadowed_by",
    "created_at",
    "created_by",
}
DROP_KEYS = {"id", "chat_jid", "sender", "verb", "reason", "time"}
VENDOR_VARIABLES = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "OLLAMA_HOST")

runner = CliRunner()


# --------------------------------------------------------------------------- helpers


def _clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """Unset every configuration variable of the calling environment (CI may set some)."""
    env: dict[str, str | None] = {
        name: None
        for name in os.environ
        if name.startswith("POSTROOM_") or name in VENDOR_VARIABLES
    }
    if extra:
        env.update(extra)
    return env


def cli(data: Path | None, *args: str, env: Mapping[str, str] | None = None) -> Result:
    argv = ([] if data is None else ["--data", str(data)]) + list(args)
    return runner.invoke(app, argv, env=_clean_env(env))


def _describe(result: Result) -> str:
    return f"exit {result.exit_code}\nstdout: {result.stdout!r}\nstderr: {result.stderr!r}"


def ok(data: Path | None, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run a command that must succeed; return its stdout."""
    result = cli(data, *args, env=env)
    assert result.exception is None, _describe(result)
    assert result.exit_code == 0, _describe(result)
    assert result.stderr == "", _describe(result)
    return result.stdout


def ok_json(data: Path | None, *args: str, env: Mapping[str, str] | None = None) -> Any:
    """Run a ``--json`` command; stdout must be one JSON document and nothing else."""
    out = ok(data, *args, "--json", env=env)
    return json.loads(out)


def assert_one_sentence(stderr: str) -> str:
    """INTERFACES §2: an error is one clear sentence on stderr, never a traceback."""
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {stderr!r}"
    sentence = lines[0].strip()
    assert len(sentence) > 10, sentence
    assert sentence.endswith((".", "!", "?", ")")), f"not a sentence: {sentence!r}"
    return sentence


def bad(data: Path | None, *args: str, env: Mapping[str, str] | None = None) -> str:
    """Run a command that must fail as a user mistake; return its one-sentence error."""
    result = cli(data, *args, env=env)
    assert result.exception is None or isinstance(result.exception, SystemExit), _describe(result)
    assert result.exit_code == 1, _describe(result)
    assert result.stdout == "", _describe(result)
    return assert_one_sentence(result.stderr)


@dataclass(frozen=True)
class State:
    routes: Any
    folders: Any


def state(data: Path) -> State:
    return State(ok_json(data, "routes", "list"), ok_json(data, "folders", "list"))


def init(data: Path) -> str:
    """``postroom init``; returns its stdout."""
    return ok(data, "init")


def route_ids(data: Path) -> list[int]:
    return [row["id"] for row in ok_json(data, "routes", "list")]


def add_route(data: Path, seq: int, match: str, target: str) -> int:
    out = ok(data, "routes", "add", "--seq", str(seq), "--match", match, "--target", target)
    return int(out.strip())


def send(data: Path, chat_jid: str, sender: str, text: str, *extra: str) -> dict[str, Any]:
    out = ok(data, "send", "--json", "--chat-jid", chat_jid, "--sender", sender, *extra, "--", text)
    decision = json.loads(out)
    assert isinstance(decision, dict)
    assert set(decision) == DECISION_KEYS
    return decision


def explain(data: Path, chat_jid: str, sender: str, text: str, *extra: str) -> dict[str, Any]:
    decision = ok_json(
        data,
        "routes",
        "explain",
        "--chat-jid",
        chat_jid,
        "--sender",
        sender,
        "--text",
        text,
        *extra,
    )
    assert isinstance(decision, dict)
    assert set(decision) == DECISION_KEYS
    return decision


def messages(data: Path, chat_jid: str) -> list[dict[str, Any]]:
    found = ok_json(data, "messages", "--chat-jid", chat_jid)
    assert isinstance(found, list)
    return found


def catch_all_id(data: Path) -> int:
    rows = [r for r in ok_json(data, "routes", "list") if r["match"] == "" and r["seq"] == 9999]
    assert len(rows) == 1, rows
    return int(rows[0]["id"])


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """An initialized data directory."""
    directory = tmp_path / "d"
    init(directory)
    return directory


# ROUTING §7: the folders and the table (spec id, seq, match, target).
SECTION7_FOLDERS = (
    "atlas",
    "atlas/content",
    "atlas/social",
    "atlas/legal",
    "atlas/dm",
    "atlas/posts",
    "acme",
    "acme/eng",
    "other",
)
SECTION7_ROWS: tuple[tuple[int, int, str, str], ...] = (
    (1, -10, "chat_jid=telegram:user/12345", "atlas/legal"),
    (2, 0, "platform=telegram", "atlas"),
    (3, 0, "platform=discord room=dm/*", "atlas/dm"),
    (4, 0, "platform=reddit verb=post", "atlas/posts"),
    (5, 10, "platform=discord room=guild/sloth", "main"),
    (6, 20, "platform=discord room=guild/* verb=mention", "main"),
    (7, 30, "platform=discord room=guild/*", "main#observe"),
    (8, 40, "chat_jid=hook:acme/eng/github", "acme/eng#deploy"),
    (9, 9999, "", "atlas"),
)


def build_section7(directory: Path, *folder_options: str) -> dict[int, int]:
    """Initialize *directory* with ROUTING §7's folders and table; map spec ids to real ids."""
    init(directory)
    for folder in SECTION7_FOLDERS:
        ok(directory, "folders", "add", folder, *folder_options)
    ok(directory, "routes", "rm", str(catch_all_id(directory)))
    assert ok_json(directory, "routes", "list") == []
    ids = {
        spec_id: add_route(directory, seq, match, target)
        for spec_id, seq, match, target in SECTION7_ROWS
    }
    listed = ok_json(directory, "routes", "list")
    assert [(r["seq"], r["match"], r["target"]) for r in listed] == [
        (seq, match, target)
        for _, seq, match, target in sorted(SECTION7_ROWS, key=lambda r: (r[1], r[0]))
    ]
    return ids


@pytest.fixture(scope="module")
def section7(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[int, int]]]:
    """A §7 data directory shared by read-only (``explain``) tests."""
    directory = tmp_path_factory.mktemp("section7") / "d"
    ids = build_section7(directory)
    before = state(directory)
    yield directory, ids
    assert state(directory) == before, "an explain changed the route table or the folders"


def _subprocess_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("POSTROOM_") and k not in VENDOR_VARIABLES
    }
    env["PYTHONIOENCODING"] = "utf-8"
    return env


def run_postroom(data: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "postroom", "--data", str(data), *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=_subprocess_env(),
        cwd=cwd,
        timeout=30,
        check=False,
    )


# --------------------------------------------------------------------------- subprocess


def test_subprocess_init_list_and_errors_end_to_end(tmp_path: Path) -> None:
    directory = tmp_path / "d"

    missing = run_postroom(directory, "routes", "list", "--json", cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stdout == ""
    assert "postroom init" in assert_one_sentence(missing.stderr)

    first = run_postroom(directory, "init", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr
    token = tomllib.loads((directory / "postroom.toml").read_text("utf-8"))["api"]["token"]
    assert token in first.stdout

    listed = run_postroom(directory, "routes", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert listed.stderr == ""
    rows = json.loads(listed.stdout)
    assert [(r["seq"], r["match"], r["target"]) for r in rows] == [(9999, "", "main")]

    refused = run_postroom(
        directory, "routes", "add", "--seq", "0", "--match", "room=[ab", "--target", "main",
        cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert_one_sentence(refused.stderr)


# --------------------------------------------------------------------------- init


def test_commands_other_than_serve_do_not_import_the_web_stack() -> None:
    """Loading the CLI (what every command and ``--help`` pays) leaves out the server's web
    stack and HTTP clients; ``serve``, ``chat``, ``channels`` and ``doctor`` import theirs."""
    heavy = ("fastapi", "starlette", "uvicorn", "httpx", "aiohttp", "uvloop")
    code = (
        "import sys; import postroom.cli.main; "
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


def test_init_creates_the_data_directory(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    out = init(directory)

    config = directory / "postroom.toml"
    assert config.is_file()
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    parsed = tomllib.loads(config.read_text("utf-8"))
    token = parsed["api"]["token"]
    assert isinstance(token, str)
    assert len(token) >= 16
    assert token in out

    assert (directory / "postroom.db").is_file()
    assert (directory / "folders" / "main" / "AGENT.md").is_file()

    folders = ok_json(directory, "folders", "list")
    assert [f["path"] for f in folders] == ["main"]
    routes = ok_json(directory, "routes", "list")
    assert len(routes) == 1
    assert (routes[0]["seq"], routes[0]["match"], routes[0]["target"]) == (9999, "", "main")
    assert routes[0]["mode"] == "fire"


def test_init_twice_changes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    init(directory)
    config = directory / "postroom.toml"
    agent = directory / "folders" / "main" / "AGENT.md"
    config_bytes = config.read_bytes()
    agent_bytes = agent.read_bytes()
    token = tomllib.loads(config_bytes.decode())["api"]["token"]
    before = state(directory)
    history = ok_json(directory, "routes", "history")

    ok(directory, "init")

    assert config.read_bytes() == config_bytes
    assert agent.read_bytes() == agent_bytes
    assert tomllib.loads(config.read_text("utf-8"))["api"]["token"] == token
    assert state(directory) == before
    assert ok_json(directory, "routes", "history") == history


def test_init_again_keeps_operator_edits(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    init(directory)
    config = directory / "postroom.toml"
    config.write_text(config.read_text("utf-8") + "\n# edited by the operator\n", "utf-8")
    edited = config.read_bytes()
    ok(directory, "folders", "add", "other")
    ok(directory, "routes", "rm", str(catch_all_id(directory)))
    add_route(directory, 5, "platform=web", "other")
    before = state(directory)

    ok(directory, "init")

    assert config.read_bytes() == edited
    assert state(directory) == before


def test_init_uses_postroom_data_variable(tmp_path: Path) -> None:
    directory = tmp_path / "from-env"
    ok(None, "init", env={"POSTROOM_DATA": str(directory)})
    assert (directory / "postroom.toml").is_file()
    assert (directory / "postroom.db").is_file()


@pytest.mark.parametrize(
    "args",
    [
        ("routes", "list"),
        ("routes", "list", "--json"),
        ("routes", "add", "--seq", "0", "--match", "", "--target", "main"),
        ("routes", "rm", "1"),
        ("routes", "history"),
        ("routes", "explain", "--chat-jid", "web:main/anon-1", "--sender", "web:anon/1"),
        ("folders", "list"),
        ("folders", "add", "atlas"),
        ("folders", "rm", "main"),
        ("send", "--chat-jid", "web:main/anon-1", "--sender", "web:anon/1", "hi"),
        ("messages", "--chat-jid", "web:main/anon-1"),
        ("drops",),
    ],
)
def test_uninitialized_directory_says_run_init(tmp_path: Path, args: tuple[str, ...]) -> None:
    directory = tmp_path / "empty"
    result = cli(directory, *args)
    assert result.exit_code == 1, _describe(result)
    assert result.stdout == ""
    assert "postroom init" in assert_one_sentence(result.stderr)
    assert not (directory / "postroom.db").exists()


def test_broken_config_file_is_one_sentence_naming_the_key(data: Path) -> None:
    config = data / "postroom.toml"
    config.write_text(config.read_text("utf-8") + "\n[queue]\nmax_atempts = 4\n", "utf-8")
    sentence = bad(data, "routes", "list", "--json")
    assert "max_atempts" in sentence
    assert "postroom.toml" in sentence


# --------------------------------------------------------------------------- folders


def test_folders_add_creates_missing_parents(data: Path) -> None:
    ok(data, "folders", "add", "a/b")
    folders = {f["path"]: f for f in ok_json(data, "folders", "list")}
    assert set(folders) == {"main", "a", "a/b"}
    assert folders["a/b"]["parent"] == "a"
    assert (data / "folders" / "a" / "AGENT.md").is_file()
    assert (data / "folders" / "a" / "b" / "AGENT.md").is_file()


def test_folders_add_existing_fails(data: Path) -> None:
    ok(data, "folders", "add", "a/b")
    before = state(data)
    for existing in ("a/b", "a", "main"):
        assert existing in bad(data, "folders", "add", existing)
    assert state(data) == before


@pytest.mark.parametrize(
    "path",
    ["a/../b", "..", "../etc", "Atlas", "atlas/Content", "a//b", "/a", "a/", "a b", ""],
)
def test_folders_add_rejects_bad_names(data: Path, path: str) -> None:
    before = state(data)
    bad(data, "folders", "add", path)
    assert state(data) == before
    assert sorted(p.name for p in (data / "folders").iterdir()) == ["main"]


@pytest.mark.parametrize("ttl", ["99999999h", "31d"])
def test_folders_add_refuses_a_ttl_over_thirty_days(data: Path, ttl: str) -> None:
    before = state(data)
    sentence = bad(data, "folders", "add", "x", "--engagement-ttl", ttl)
    assert "engagement_ttl" in sentence and "from 0 to 30d" in sentence and ttl in sentence
    assert state(data) == before


def test_folders_rm_refuses_a_folder_routes_use_and_names_them(data: Path) -> None:
    ok(data, "folders", "add", "x")
    ok(data, "folders", "add", "tpl")
    first = add_route(data, 0, "platform=web", "x")
    second = add_route(data, 1, "platform=slack", "x#observe")
    template = add_route(data, 2, "platform=discord", "tpl/{sender}")
    before = state(data)

    sentence = bad(data, "folders", "rm", "x")
    assert re.search(rf"\b{first}\b", sentence), sentence
    assert re.search(rf"\b{second}\b", sentence), sentence

    sentence = bad(data, "folders", "rm", "tpl")
    assert re.search(rf"\b{template}\b", sentence), sentence

    sentence = bad(data, "folders", "rm", "main")
    assert re.search(rf"\b{catch_all_id(data)}\b", sentence), sentence

    assert state(data) == before


def test_folders_rm_removes_an_unused_folder(data: Path) -> None:
    ok(data, "folders", "add", "spare")
    ok(data, "folders", "rm", "spare")
    assert [f["path"] for f in ok_json(data, "folders", "list")] == ["main"]
    assert not (data / "folders" / "spare").exists()
    bad(data, "folders", "rm", "spare")


# --------------------------------------------------------------------------- routes


def test_routes_add_prints_the_id(data: Path) -> None:
    out = ok(data, "routes", "add", "--seq", "5", "--match", "platform=web", "--target", "main")
    new_id = int(out.strip())
    rows = {r["id"]: r for r in ok_json(data, "routes", "list")}
    assert new_id in rows
    assert (rows[new_id]["seq"], rows[new_id]["match"], rows[new_id]["target"]) == (
        5,
        "platform=web",
        "main",
    )
    as_json = ok_json(data, "routes", "add", "--seq=-3", "--match", "verb=post", "--target", "main")
    assert as_json["id"] in route_ids(data)


def test_routes_list_json_is_a_bare_array_of_route_objects(data: Path) -> None:
    ok(data, "folders", "add", "atlas")
    add_route(data, 0, "platform=telegram verb=mention", "atlas")
    add_route(data, -5, "chat_jid=hook:acme/eng/github", "atlas#deploy")
    add_route(data, 10, "platform=discord", "atlas#observe")
    out = ok(data, "routes", "list", "--json")
    rows = json.loads(out)
    assert isinstance(rows, list)
    assert len(rows) == 4
    for row in rows:
        assert isinstance(row, dict)
        assert set(row) == ROUTE_KEYS
        assert isinstance(row["id"], int)
        assert isinstance(row["seq"], int)
        assert isinstance(row["created_at"], str)
        assert row["created_by"].startswith("cli")
    # Evaluation order: seq ascending, then id.
    assert [r["seq"] for r in rows] == [-5, 0, 10, 9999]
    by_target = {r["target"]: r for r in rows}
    assert by_target["atlas"]["mode"] == "fire"
    assert by_target["atlas"]["fires_on"] == "mentions only"
    assert by_target["atlas#deploy"]["mode"] == "topic"
    assert by_target["atlas#observe"]["mode"] == "observe"
    assert by_target["main"]["fires_on"] == "every message"


def test_routes_list_reports_shadowed_rows(data: Path) -> None:
    ok(data, "folders", "add", "atlas")
    broad = add_route(data, 0, "platform=telegram", "atlas")
    # Adding a row an earlier one shadows adds it, with a warning naming that row.
    added = cli(
        data,
        "routes",
        "add",
        "--seq",
        "50",
        "--match",
        "chat_jid=telegram:user/5",
        "--target",
        "main",
    )
    assert added.exit_code == 0, _describe(added)
    narrow = int(added.stdout)
    assert added.stderr == (
        f"warning: route {narrow} never fires: row {broad} (seq 0, platform=telegram → atlas) "
        "comes first and matches every message it would.\n"
    )
    rows = {r["id"]: r for r in ok_json(data, "routes", "list")}
    assert rows[narrow]["shadowed_by"] == broad
    assert rows[broad]["shadowed_by"] is None
    assert rows[catch_all_id(data)]["shadowed_by"] is None


def test_routes_rm_removes_a_row_and_refuses_unknown_ids(data: Path) -> None:
    extra = add_route(data, 1, "platform=web", "main")
    ok(data, "routes", "rm", str(extra))
    assert extra not in route_ids(data)
    before = state(data)
    assert str(extra) in bad(data, "routes", "rm", str(extra))
    assert "999" in bad(data, "routes", "rm", "999")
    assert state(data) == before


def test_routes_history_records_adds_and_deletes_by_the_cli(data: Path) -> None:
    added = add_route(data, 1, "platform=web", "main")
    ok(data, "routes", "rm", str(added))
    entries = ok_json(data, "routes", "history")
    assert isinstance(entries, list)
    mine = [e for e in entries if e["route_id"] == added]
    assert sorted(e["action"] for e in mine) == ["add", "delete"]
    for entry in entries:
        assert entry["actor"].startswith("cli")
    add = next(e for e in mine if e["action"] == "add")
    delete = next(e for e in mine if e["action"] == "delete")
    assert add["after"]["match"] == "platform=web"
    assert delete["before"]["target"] == "main"


BAD_ROUTES: list[tuple[str, str, str]] = [
    ("0", "foo=bar", "main"),  # unknown match key
    ("0", "platform", "main"),  # a token without '='
    ("0", "platform=web roomx", "main"),  # a token without '=' after a good one
    ("0", "room=[ab", "main"),  # '[' not closed
    ("0", "room=ab\\", "main"),  # trailing backslash
    ("0", "room=guild/", "main"),  # pattern ending in '/'
    ("0", "chat_jid=telegram:group/", "main"),  # pattern ending in '/'
    ("x", "platform=web", "main"),  # non-integer seq
    ("1.5", "platform=web", "main"),  # non-integer seq
    ("", "platform=web", "main"),  # empty seq
    ("0", "platform=web", "nosuch"),  # target folder does not exist
    ("0", "platform=web", "nosuch/{sender}"),  # template parent does not exist
    ("0", "platform=web", "main#Bad!"),  # bad fragment
    ("0", "platform=web", "main#a b"),  # bad fragment
    ("0", "platform=web", "main#x#y"),  # two fragments
    ("0", "platform=web", "main/../main"),  # '..'
    ("0", "platform=web", "Main"),  # uppercase folder
    ("0", "platform=web", "/main"),  # leading '/'
    ("0", "platform=web", ""),  # empty target
]


@pytest.mark.parametrize(("seq", "match", "target"), BAD_ROUTES)
def test_routes_add_rejects_bad_input_and_changes_nothing(
    data: Path, seq: str, match: str, target: str
) -> None:
    before = state(data)
    history = ok_json(data, "routes", "history")
    bad(data, "routes", "add", f"--seq={seq}", "--match", match, "--target", target)
    assert state(data) == before
    assert ok_json(data, "routes", "history") == history


def test_routes_add_error_names_the_problem(data: Path) -> None:
    assert "foo" in bad(data, "routes", "add", "--seq", "0", "--match", "foo=x", "--target", "main")
    assert "nosuch" in bad(data, "routes", "add", "--seq", "0", "--match", "", "--target", "nosuch")
    assert "seq" in bad(data, "routes", "add", "--seq", "ten", "--match", "", "--target", "main")


def _write(path: Path, rows: Any) -> Path:
    path.write_text(json.dumps(rows), "utf-8")
    return path


def test_routes_set_replaces_the_table(data: Path, tmp_path: Path) -> None:
    ok(data, "folders", "add", "atlas")
    old_ids = set(route_ids(data))
    rows = [
        {"seq": 0, "match": "platform=telegram", "target": "atlas"},
        {"seq": 20, "match": "platform=discord room=guild/*", "target": "main#observe"},
        {"seq": 9999, "match": "", "target": "main"},
    ]
    printed = ok_json(data, "routes", "set", str(_write(tmp_path / "t.json", rows)))
    assert isinstance(printed, list)
    listed = ok_json(data, "routes", "list")
    assert printed == listed
    assert [(r["seq"], r["match"], r["target"]) for r in listed] == [
        (r["seq"], r["match"], r["target"]) for r in rows
    ]
    assert not old_ids & {r["id"] for r in listed}
    entries = ok_json(data, "routes", "history")
    assert entries[0]["actor"].startswith("cli")


@pytest.mark.parametrize(
    "invalid",
    [
        {"seq": 5, "match": "nosuchkey=x", "target": "main"},
        {"seq": 5, "match": "room=[ab", "target": "main"},
        {"seq": 5, "match": "platform=web", "target": "nosuch"},
        {"seq": "five", "match": "platform=web", "target": "main"},
        {"match": "platform=web", "target": "main"},
        {"seq": 5, "match": "platform=web", "target": "main", "colour": "red"},
        "not an object",
    ],
)
def test_routes_set_with_one_invalid_row_changes_nothing(
    data: Path, tmp_path: Path, invalid: Any
) -> None:
    ok(data, "folders", "add", "atlas")
    before = state(data)
    history = ok_json(data, "routes", "history")
    rows = [
        {"seq": 0, "match": "platform=telegram", "target": "atlas"},
        invalid,
        {"seq": 9999, "match": "", "target": "main"},
    ]
    bad(data, "routes", "set", str(_write(tmp_path / "t.json", rows)))
    assert state(data) == before
    assert ok_json(data, "routes", "history") == history


@pytest.mark.parametrize(
    "text",
    ['[{"seq": 0, "match": "", "target": "main"', "not json at all", "", '{"seq": 0}'],
)
def test_routes_set_refuses_a_file_that_is_not_a_json_array(
    data: Path, tmp_path: Path, text: str
) -> None:
    before = state(data)
    file = tmp_path / "t.json"
    file.write_text(text, "utf-8")
    bad(data, "routes", "set", str(file))
    assert state(data) == before


def test_routes_set_refuses_a_missing_file(data: Path, tmp_path: Path) -> None:
    before = state(data)
    bad(data, "routes", "set", str(tmp_path / "absent.json"))
    assert state(data) == before


# --------------------------------------------------------------------------- explain


def test_explain_prints_the_decision_and_changes_nothing(data: Path) -> None:
    def unchanged() -> tuple[State, Any, Any]:
        return state(data), ok_json(data, "routes", "history"), ok_json(data, "drops")

    before = unchanged()
    decision = explain(data, "web:main/anon-1", "web:anon/1", "hello")
    assert decision["action"] == "fire"
    assert decision["layer"] == "route"
    assert decision["folder"] == "main"
    assert decision["topic"] == ""
    assert decision["content"] == "hello"
    assert decision["inline"] is None
    assert decision["route_id"] == catch_all_id(data)
    assert decision["ack"] is None
    assert decision["job_id"] is None
    assert isinstance(decision["reason"], str)
    assert decision["reason"]
    assert unchanged() == before

    # A steering command explained is not applied.
    ok(data, "folders", "add", "main/sub")
    before = unchanged()
    command = explain(data, "web:main/anon-1", "web:anon/1", "@sub")
    assert command["action"] == "command"
    assert command["ack"] == "routing → main/sub"
    after_command = explain(data, "web:main/anon-1", "web:anon/1", "hello")
    assert after_command["folder"] == "main"
    assert after_command["layer"] == "route"
    assert unchanged() == before

    # A miss explained is not recorded as a drop.
    ok(data, "routes", "rm", str(catch_all_id(data)))
    before = unchanged()
    miss = explain(data, "matrix:room/1", "matrix:user/@a:x.org", "nobody home")
    assert (miss["action"], miss["layer"], miss["route_id"]) == ("ignore", "miss", None)
    assert unchanged() == before

    assert messages(data, "web:main/anon-1") == []
    assert messages(data, "matrix:room/1") == []
    assert ok_json(data, "drops") == []


def test_explain_reports_a_sender_folder_without_creating_it(data: Path) -> None:
    ok(data, "folders", "add", "atlas")
    add_route(data, 0, "platform=discord room=guild/*", "atlas/{sender}")
    before = state(data)
    decision = explain(data, "discord:guild/77/channel/3", "discord:user/alice", "hi")
    assert decision["action"] == "fire"
    assert decision["folder"] == "atlas/dc-alice"
    assert state(data) == before
    assert not (data / "folders" / "atlas" / "dc-alice").exists()

    fired = send(data, "discord:guild/77/channel/3", "discord:user/alice", "hi")
    assert fired["folder"] == "atlas/dc-alice"
    assert "atlas/dc-alice" in {f["path"] for f in ok_json(data, "folders", "list")}


def test_explain_rejects_bad_addresses(data: Path) -> None:
    before = state(data)
    bad(data, "routes", "explain", "--chat-jid", "no-colon", "--sender", "web:anon/1")
    bad(data, "routes", "explain", "--chat-jid", "web:main/anon-1", "--sender", "no-colon")
    bad(data, "send", "--chat-jid", "no-colon", "--sender", "web:anon/1", "hi")
    assert state(data) == before
    assert ok_json(data, "drops") == []


def test_assistant_alias_from_the_environment_reaches_the_router(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    init(directory)
    ok(directory, "routes", "rm", str(catch_all_id(directory)))
    mention = add_route(directory, 0, "verb=mention", "main")
    add_route(directory, 10, "", "main#observe")
    plain = explain(directory, "telegram:group/5", "telegram:user/1", "@bot hi")
    assert plain["action"] == "observe"
    env = {"POSTROOM_ASSISTANT__ALIASES": '["ghost","bot"]'}
    decision = ok_json(
        directory, "routes", "explain", "--chat-jid", "telegram:group/5",
        "--sender", "telegram:user/1", "--text", "@bot hi", env=env,
    )  # fmt: skip
    assert decision["action"] == "fire"
    assert decision["route_id"] == mention


# --------------------------------------------------------------------------- ROUTING §7


SECTION7_EXAMPLES: list[tuple[str, str, str, str, str, str, str, int]] = [
    # chat_jid, sender, text, verb, action, folder, topic, spec row id
    ("telegram:user/12345", "telegram:user/12345", "hi", "message", "fire", "atlas/legal", "", 1),
    ("telegram:group/5", "telegram:user/42", "hi", "message", "fire", "atlas", "", 2),
    ("discord:dm/9", "discord:user/9", "hi", "message", "fire", "atlas/dm", "", 3),
    ("discord:guild/sloth/channel/3", "discord:user/1", "hi", "message", "fire", "main", "", 5),
    ("discord:guild/77/channel/3", "discord:user/1", "hi", "message", "observe", "main", "", 7),
    (
        "discord:guild/77/channel/3",
        "discord:user/1",
        "@Postroom hi",
        "message",
        "fire",
        "main",
        "",
        6,
    ),
    ("discord:guild/77/channel/3", "discord:user/1", "@atlas", "message", "observe", "main", "", 7),
    ("reddit:subreddit/x", "reddit:user/u", "a post", "post", "fire", "atlas/posts", "", 4),
    ("reddit:subreddit/x", "reddit:user/u", "a reply", "reply", "fire", "atlas", "", 9),
    ("hook:acme/eng/github", "hook:github", "deployed", "message", "fire", "acme/eng", "deploy", 8),
    ("slack:T1/channel/C1", "slack:user/U1", "hi", "message", "fire", "atlas", "", 9),
]


@pytest.mark.parametrize(
    ("chat_jid", "sender", "text", "verb", "action", "folder", "topic", "row"),
    SECTION7_EXAMPLES,
)
def test_section7_examples_through_explain(
    section7: tuple[Path, dict[int, int]],
    chat_jid: str,
    sender: str,
    text: str,
    verb: str,
    action: str,
    folder: str,
    topic: str,
    row: int,
) -> None:
    directory, ids = section7
    decision = explain(directory, chat_jid, sender, text, "--verb", verb)
    assert decision["action"] == action, decision
    assert decision["layer"] == "route", decision
    assert decision["folder"] == folder, decision
    assert decision["topic"] == topic, decision
    assert decision["route_id"] == ids[row], decision
    assert decision["content"] == text, decision
    assert decision["inline"] is None
    assert decision["ack"] is None
    assert decision["job_id"] is None


def test_section7_inline_child_through_explain(section7: tuple[Path, dict[int, int]]) -> None:
    directory, ids = section7
    decision = explain(directory, "telegram:group/5", "telegram:user/42", "@content draft post")
    assert {k: v for k, v in decision.items() if k != "job_id"} == {
        "action": "fire",
        "layer": "route",
        "folder": "atlas/content",
        "topic": "",
        "content": "draft post",
        "inline": "@content",
        "route_id": ids[2],
        "ack": None,
        "reason": (
            f"row {ids[2]} (seq 0) matched platform=telegram → atlas; "
            "inline @content → atlas/content"
        ),
    }


def test_section7_miss_without_the_catch_all(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    ids = build_section7(directory)
    ok(directory, "routes", "rm", str(ids[9]))
    decision = explain(directory, "matrix:room/1", "matrix:user/@bob:example.org", "hi")
    assert decision == {
        "action": "ignore",
        "layer": "miss",
        "folder": None,
        "topic": None,
        "content": None,
        "inline": None,
        "route_id": None,
        "ack": None,
        "job_id": None,
        "reason": "no route matched matrix:room/1",
    }


def test_section7_telegram_group_sequence_through_send(tmp_path: Path) -> None:
    directory = tmp_path / "d"
    ids = build_section7(directory, "--engagement-ttl", "0")
    row2 = ids[2]
    chat, who = "telegram:group/5", "telegram:user/42"

    def step(text: str) -> dict[str, Any]:
        return send(directory, chat, who, text)

    def assert_fire(
        decision: dict[str, Any], folder: str, content: str, *, topic: str = "", layer: str
    ) -> None:
        assert decision["action"] == "fire", decision
        assert decision["layer"] == layer, decision
        assert decision["folder"] == folder, decision
        assert decision["content"] == content, decision
        assert decision["topic"] == topic, decision
        assert decision["ack"] is None, decision

    def assert_ack(decision: dict[str, Any], ack: str) -> None:
        assert decision["action"] == "command", decision
        assert decision["layer"] == "command", decision
        assert decision["ack"] == ack, decision
        assert decision["folder"] is None, decision
        assert decision["topic"] is None, decision
        assert decision["content"] is None, decision
        assert decision["job_id"] is None, decision

    first = step("@content draft post")
    assert_fire(first, "atlas/content", "draft post", layer="route")
    assert first["inline"] == "@content"
    assert first["route_id"] == row2

    assert_fire(step("hello"), "atlas", "hello", layer="route")

    sticky = step("@atlas/social")
    assert_ack(sticky, "routing → atlas/social")
    assert sticky["route_id"] == row2
    assert sticky["reason"] == "sticky group set to atlas/social (under atlas)"

    assert_fire(step("what's new"), "atlas/social", "what's new", layer="sticky")
    assert_ack(step("@other"), "routing → other refused: not under atlas")
    assert_fire(step("still there?"), "atlas/social", "still there?", layer="sticky")
    assert_ack(step("@"), "routing reset to default")
    assert_fire(step("back home"), "atlas", "back home", layer="route")

    nosuch = step("@nosuch hi")
    assert_fire(nosuch, "atlas", "@nosuch hi", layer="route")
    assert nosuch["inline"] is None
    everyone = step("@everyone")
    assert_fire(everyone, "atlas", "@everyone", layer="route")
    assert everyone["inline"] is None

    assert_ack(step("#support"), "topic → support")
    billing = step("#billing refund please")
    assert_fire(billing, "atlas", "refund please", topic="billing", layer="route")
    assert billing["inline"] == "#billing"
    assert_fire(
        step("my account is locked"),
        "atlas",
        "my account is locked",
        topic="support",
        layer="route",
    )
    assert_ack(step("#"), "topic reset to default")
    assert_fire(step("thanks"), "atlas", "thanks", layer="route")

    # The stored history keeps the original texts, the acks as host messages.
    stored = messages(directory, chat)
    users = [m for m in stored if m["message_type"] == "user"]
    hosts = [m for m in stored if m["message_type"] == "host"]
    assert [m["content"] for m in users][:3] == ["@content draft post", "hello", "@atlas/social"]
    assert [m["content"] for m in hosts] == [
        "routing → atlas/social",
        "routing → other refused: not under atlas",
        "routing reset to default",
        "topic → support",
        "topic reset to default",
    ]
    assert users[0]["routed_to"] == "atlas/content"
    assert users[0]["metadata"].get("routed_content") == "draft post"


# ------------------------------------------------------------------- send / messages / drops


def test_send_same_id_twice_is_a_duplicate(data: Path) -> None:
    chat, who = "web:main/anon-1", "web:anon/1"
    first = send(data, chat, who, "hello", "--id", "m-1")
    assert first["layer"] == "route"
    second = send(data, chat, who, "hello", "--id", "m-1")
    assert second["layer"] == "duplicate"
    assert {k: v for k, v in second.items() if k != "layer"} == {
        k: v for k, v in first.items() if k != "layer"
    }
    stored = messages(data, chat)
    assert [m["id"] for m in stored] == ["m-1"]

    # Another chat may reuse the id: dedupe is per (id, chat_jid).
    other = send(data, "web:main/anon-2", "web:anon/2", "hello", "--id", "m-1")
    assert other["layer"] == "route"


def test_messages_shows_host_acks_distinguishably(data: Path) -> None:
    ok(data, "folders", "add", "main/sub")
    chat, who = "web:main/anon-1", "web:anon/1"
    send(data, chat, who, "hello there")
    ack = send(data, chat, who, "@sub")
    assert ack["ack"] == "routing → main/sub"

    human = ok(data, "messages", "--chat-jid", chat)
    lines = [line for line in human.splitlines() if line.strip()]
    host_lines = [line for line in lines if "routing → main/sub" in line]
    assert len(host_lines) == 1
    assert "🏠" in host_lines[0]
    user_lines = [line for line in lines if "hello there" in line]
    assert len(user_lines) == 1
    assert "🏠" not in user_lines[0]
    command_lines = [line for line in lines if line.rstrip().endswith("@sub")]
    assert len(command_lines) == 1
    assert "🏠" not in command_lines[0]

    stored = messages(data, chat)
    assert [m["message_type"] for m in stored] == ["user", "user", "host"]
    plain, command, host = stored
    assert plain["content"] == "hello there"
    assert plain["routed_to"] == "main"
    assert command["content"] == "@sub"
    assert command["metadata"]["command"] is True
    assert command["routed_to"] is None
    assert host["content"] == "routing → main/sub"
    assert not plain["metadata"].get("command")
    for message in stored:
        assert isinstance(message["metadata"], dict)

    by_folder = ok_json(data, "messages", "--folder", "main")
    assert [m["content"] for m in by_folder] == ["hello there"]
    limited = ok_json(data, "messages", "--chat-jid", chat, "--limit", "1")
    assert len(limited) == 1


def test_messages_needs_a_chat_or_folder(data: Path) -> None:
    bad(data, "messages")


def test_unrouted_message_is_dropped_without_its_content(data: Path) -> None:
    ok(data, "routes", "rm", str(catch_all_id(data)))
    secret = "zebra-quartz-4711 my private words"
    chat, who = "matrix:room/1", "matrix:user/@bob:example.org"

    decision = send(data, chat, who, secret, "--id", "drop-1")
    assert decision["action"] == "ignore"
    assert decision["layer"] == "miss"
    assert decision["route_id"] is None
    assert decision["folder"] is None
    assert decision["content"] is None
    assert chat in decision["reason"]

    again = send(data, chat, who, secret, "--id", "drop-1")
    assert again["layer"] == "duplicate"
    assert again["action"] == "ignore"

    assert messages(data, chat) == []
    assert "zebra" not in ok(data, "messages", "--chat-jid", chat)

    drops_json = ok(data, "drops", "--json")
    drops = json.loads(drops_json)
    assert len(drops) == 1
    (drop,) = drops
    assert set(drop) == DROP_KEYS
    assert (drop["id"], drop["chat_jid"], drop["sender"], drop["reason"]) == (
        "drop-1",
        chat,
        who,
        "no_route",
    )
    assert drop["verb"] == "message"
    drops_human = ok(data, "drops")
    assert "no_route" in drops_human
    for text in (drops_json, drops_human):
        assert "zebra" not in text
        assert secret not in text

    needle = b"zebra-quartz-4711"
    for name in ("postroom.db", "postroom.db-wal"):
        file = data / name
        if file.exists():
            assert needle not in file.read_bytes(), f"the dropped content is in {name}"
