"""``postroom tokens`` and the route previews of the CLI (``routes preview``, ``--dry-run``,
``routes history``), on a data directory made by ``postroom init``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from channels.channel_gateway import cli, init_data_dir, stored_rows


def ok(data: Path, *args: str) -> str:
    result = cli(data, *args)
    assert result.exit_code == 0 and result.stderr == "", (result.stdout, result.stderr)
    return result.stdout


def ok_json(data: Path, *args: str) -> Any:
    return json.loads(ok(data, *args, "--json"))


def bad(data: Path, *args: str) -> str:
    """A user mistake: exit 1, nothing on stdout, one sentence on stderr."""
    result = cli(data, *args)
    assert result.exit_code == 1 and result.stdout == "", (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in lines[0], result.stderr
    return lines[0]


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "data")


def test_tokens_add_list_rm(data: Path) -> None:
    ok(data, "folders", "add", "team")
    made = ok_json(data, "tokens", "add", "agent", "--scope", "routes", "--folder", "team")
    assert set(made) == {"name", "scope", "folder", "secret", "created_at"}
    assert (made["name"], made["scope"], made["folder"]) == ("agent", "routes", "team")
    assert len(made["secret"]) >= 32
    shown = ok(data, "tokens", "add", "reader")
    assert "shown only now" in shown
    (secret_line,) = [line for line in shown.splitlines() if line and " " not in line]
    listed = ok_json(data, "tokens", "list")
    assert [(t["name"], t["scope"], t["folder"]) for t in listed] == [
        ("agent", "routes", "team"),
        ("reader", "read", None),
    ]
    assert all("secret" not in t for t in listed)
    assert made["secret"] not in ok(data, "tokens", "list")
    assert secret_line not in ok(data, "tokens", "list")
    assert listed[0]["created_by"].startswith("cli")
    assert "already exists" in bad(data, "tokens", "add", "agent")
    assert "Unknown scope" in bad(data, "tokens", "add", "x", "--scope", "everything")
    assert "no folder nosuch" in bad(data, "tokens", "add", "x", "--folder", "nosuch")
    assert "not valid" in bad(data, "tokens", "add", "Bad Name")
    assert ok_json(data, "tokens", "rm", "agent") == {"name": "agent", "removed": True}
    assert "There is no token agent." in bad(data, "tokens", "rm", "agent")
    assert [t["name"] for t in ok_json(data, "tokens", "list")] == ["reader"]


def _table(data: Path) -> list[tuple[int, str, str]]:
    return [(r["seq"], r["match"], r["target"]) for r in ok_json(data, "routes", "list")]


def test_routes_preview_and_dry_runs_change_nothing(data: Path, tmp_path: Path) -> None:
    ok(data, "folders", "add", "support")
    sent = json.loads(
        ok(data, "send", "--json", "--chat-jid", "shop:room/1", "--sender", "shop:user/1", "hi")
    )
    assert sent["folder"] == "main"
    before = _table(data)
    audit = stored_rows(data, "SELECT count(*) FROM route_audit")
    proposed = tmp_path / "proposed.json"
    proposed.write_text(
        json.dumps(
            [
                {"seq": 0, "match": "platform=shop", "target": "support"},
                {"seq": 9999, "match": "", "target": "main"},
            ]
        ),
        "utf-8",
    )
    preview = ok_json(data, "routes", "preview", str(proposed))
    assert (preview["examined"], preview["changed"]) == (1, 1)
    (moved,) = preview["messages"]
    assert (moved["chat_jid"], moved["content"]) == ("shop:room/1", "hi")
    assert (moved["before"]["folder"], moved["after"]["folder"]) == ("main", "support")
    assert ok_json(data, "routes", "set", str(proposed), "--dry-run") == preview
    added = ok_json(
        data,
        "routes",
        "add",
        "--seq",
        "0",
        "--match",
        "platform=shop",
        "--target",
        "support",
        "--dry-run",
    )
    assert added == preview
    removed = ok_json(data, "routes", "rm", "1", "--dry-run")
    assert removed["messages"][0]["after"]["action"] == "ignore"
    human = ok(data, "routes", "preview", str(proposed))
    assert "1 would be routed differently" in human and "support" in human
    unchanged = tmp_path / "same.json"
    unchanged.write_text(json.dumps([{"seq": 9999, "match": "", "target": "main"}]), "utf-8")
    assert "none would change" in ok(data, "routes", "preview", str(unchanged))
    assert _table(data) == before
    assert stored_rows(data, "SELECT count(*) FROM route_audit") == audit
    assert "does not exist" in bad(
        data, "routes", "add", "--seq", "0", "--target", "nosuch", "--dry-run"
    )
    assert "no route with id 77" in bad(data, "routes", "rm", "77", "--dry-run")


def test_routes_history_has_the_api_shape(data: Path) -> None:
    ok(data, "routes", "add", "--seq", "5", "--match", "platform=web", "--target", "main")
    (latest, *_) = ok_json(data, "routes", "history")
    assert {"id", "time", "actor", "action", "before", "after"} <= set(latest)
    assert latest["action"] == "add" and latest["actor"].startswith("cli")
    assert latest["after"]["match"] == "platform=web"
