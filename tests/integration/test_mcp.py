"""The MCP server (INTERFACES §5) driven by the official ``mcp`` client.

Over streamable HTTP against ``/mcp`` of a gateway built by ``Gateway.build`` and running in
the test's event loop, and over stdio against a real ``postroom mcp`` subprocess on the same
data directory. Messages are posted through the HTTP API, as an adapter would.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from channels.channel_gateway import (
    cli,
    configure,
    eventually,
    init_data_dir,
    running_gateway,
    stored_rows,
)
from postroom.app.gateway import Gateway
from postroom.mcp import allowed_hosts

pytestmark = pytest.mark.timeout(120)

TOOLS = {
    "list_routes",
    "add_route",
    "delete_route",
    "set_routes",
    "preview_routes",
    "explain_route",
    "route_history",
    "list_folders",
    "get_folder",
    "create_folder",
    "update_folder",
    "list_jobs",
    "retry_job",
    "cancel_job",
    "list_drops",
    "read_messages",
    "send_message",
    "get_run",
    "disengage",
    "list_principals",
    "approve_pairing",
    "deny_pairing",
}
READ_TOOLS = {
    "list_routes",
    "preview_routes",
    "explain_route",
    "route_history",
    "list_folders",
    "get_folder",
    "list_jobs",
    "list_drops",
    "read_messages",
    "get_run",
    "list_principals",
}


# --------------------------------------------------------------------------- helpers


def owner_token(data: Path) -> str:
    token = tomllib.loads((data / "postroom.toml").read_text("utf-8"))["api"]["token"]
    assert isinstance(token, str)
    return token


@contextlib.asynccontextmanager
async def mcp_http(url: str, token: str) -> AsyncIterator[Client]:
    """The official client over streamable HTTP, with a bearer token."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
        yield client


@contextlib.asynccontextmanager
async def mcp_stdio(data: Path, *args: str) -> AsyncIterator[Client]:
    """The official client over stdio, against a ``postroom mcp`` subprocess."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "postroom", "--data", str(data), "mcp", *args],
        # The stdio client passes on only a few safe variables; the package under test is
        # found through PYTHONPATH.
        env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
    )
    with open(os.devnull, "w") as errlog:  # noqa: ASYNC230 - opening /dev/null never blocks
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


async def call(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """A tool's answer: the same object as text and as structured content."""
    result = await client.call_tool(tool, arguments or {})
    text = result.content[0].text if result.content else ""
    assert not result.is_error, text
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, arguments: dict[str, Any] | None = None) -> str:
    """A refused call: a tool error carrying one sentence."""
    result = await client.call_tool(tool, arguments or {})
    assert result.is_error, result
    (content,) = result.content
    sentence = content.text
    assert sentence.strip() and "\n" not in sentence and "Traceback" not in sentence
    return sentence


async def table(client: Client) -> list[tuple[int, str, str]]:
    routes = (await call(client, "list_routes"))["routes"]
    return [(r["seq"], r["match"], r["target"]) for r in routes]


async def post_message(url: str, token: str, chat_jid: str, content: str = "hi") -> Any:
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http:
        response = await http.post(
            f"{url}/api/v1/messages",
            json={
                "chat_jid": chat_jid,
                "sender": chat_jid.split(":")[0] + ":user/1",
                "content": content,
            },
        )
    assert response.status_code == 200, response.text
    return response.json()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return init_data_dir(tmp_path / "data")


@pytest.fixture
async def server(data: Path) -> AsyncIterator[tuple[Gateway, str]]:
    async with running_gateway(data) as running:
        yield running


# --------------------------------------------------------------------------- streamable HTTP


async def test_the_tools_are_listed_with_schemas_written_for_a_model(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    async with mcp_http(url, owner_token(data)) as client:
        listed = (await client.list_tools()).tools
    assert {t.name for t in listed} == TOOLS
    for tool in listed:
        assert tool.description and len(tool.description) > 30, tool.name
        schema = tool.input_schema
        assert schema["type"] == "object" and schema.get("additionalProperties") is False
        assert "$defs" not in schema and "$ref" not in str(schema), tool.name
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
    add = next(t for t in listed if t.name == "add_route")
    assert set(add.input_schema["required"]) == {"seq", "target"}
    assert add.input_schema["properties"]["seq"]["type"] == "integer"
    send = next(t for t in listed if t.name == "send_message")
    assert "untrusted" in send.input_schema["properties"]["verb"]["enum"]


async def test_a_route_added_over_mcp_routes_the_next_message(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    token = owner_token(data)
    before = await post_message(url, token, "shop:room/1")
    assert before["decision"]["folder"] == "main"
    async with mcp_http(url, token) as client:
        folder = await call(client, "create_folder", {"path": "support", "persona": "Helpful."})
        assert folder["path"] == "support" and folder["persona"] == "Helpful."
        added = await call(
            client, "add_route", {"seq": 0, "match": "platform=shop", "target": "support"}
        )
        after = await post_message(url, token, "shop:room/1", "again")
        assert after["decision"]["folder"] == "support"
        assert after["decision"]["route_id"] == added["id"]
        history = (await call(client, "route_history", {"limit": 5}))["history"]
    assert history[0]["actor"] == "mcp:owner" and history[0]["action"] == "add"
    assert history[0]["after"]["target"] == "support"
    assert {"id", "time", "actor", "action", "before", "after"} <= set(history[0])


async def test_update_folder_changes_only_the_settings_given_and_stays_in_scope(
    server: tuple[Gateway, str], data: Path
) -> None:
    gateway, url = server
    async with mcp_http(url, owner_token(data)) as owner:
        await call(owner, "create_folder", {"path": "team", "model": "m-1", "persona": "Old."})
        await call(owner, "create_folder", {"path": "other"})
        changed = await call(owner, "update_folder", {"path": "team", "persona": "New."})
        assert (changed["persona"], changed["model"]) == ("New.", "m-1")
        # null unsets a setting: the folder inherits it again.
        unset = await call(owner, "update_folder", {"path": "team", "model": None})
        assert unset["model"] is None
        assert "engagement_ttl" in await refused(
            owner, "update_folder", {"path": "team", "engagement_ttl": "99999999h"}
        )
        assert (await call(owner, "get_folder", {"path": "team"}))["persona"] == "New."
    assert "New." in (data / "folders" / "team" / "AGENT.md").read_text("utf-8")
    made = await gateway.services.tokens.add("team-agent", scope="routes", folder="team", actor="t")
    async with mcp_http(url, made.secret) as client:
        reason = await refused(client, "update_folder", {"path": "other", "persona": "Mine."})
        assert "outside team" in reason
        await call(client, "update_folder", {"path": "team", "persona": "Scoped."})
    assert (await gateway.services.folders.get_folder("other")).persona in (None, "")
    audit = await gateway.services.folders.history("team")
    assert audit[0].actor == "mcp:team-agent"


async def test_a_malformed_match_is_refused_with_the_reason_and_nothing_changes(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    async with mcp_http(url, owner_token(data)) as client:
        before = await table(client)
        reason = await refused(
            client, "add_route", {"seq": 1, "match": "room=[ab", "target": "main"}
        )
        assert "never closed" in reason
        reason = await refused(
            client, "add_route", {"seq": 1, "match": "colour=red", "target": "main"}
        )
        assert "colour" in reason
        reason = await refused(
            client,
            "set_routes",
            {
                "rows": [
                    {"seq": 1, "target": "main"},
                    {"seq": 2, "match": "room=a/", "target": "main"},
                ]
            },
        )
        assert reason.startswith("Row 2 of the table")
        # Strict types and unknown arguments: the sentence names the argument.
        assert "seq" in await refused(client, "add_route", {"seq": "1", "target": "main"})
        assert "colour" in await refused(
            client, "add_route", {"seq": 1, "target": "main", "colour": "red"}
        )
        assert "nosuch" in await refused(client, "nosuch_tool")
        assert await table(client) == before
    assert stored_rows(data, "SELECT count(*) FROM route_audit")[0][0] == 1  # init's row only


async def test_a_folder_confined_token_stays_inside_its_folder(
    server: tuple[Gateway, str], data: Path
) -> None:
    gateway, url = server
    async with mcp_http(url, owner_token(data)) as owner:
        for path in ("team", "team/bot", "other"):
            await call(owner, "create_folder", {"path": path})
        await call(owner, "add_route", {"seq": 10, "match": "platform=a", "target": "team"})
        await call(owner, "add_route", {"seq": 20, "match": "platform=b", "target": "other"})
        whole = await table(owner)
    made = await gateway.services.tokens.add("team-agent", scope="routes", folder="team", actor="t")
    async with mcp_http(url, made.secret) as client:
        assert await table(client) == [(10, "platform=a", "team")]
        reason = await refused(
            client, "add_route", {"seq": 1, "match": "platform=c", "target": "other"}
        )
        assert "outside team" in reason
        assert "outside team" in await refused(client, "create_folder", {"path": "elsewhere"})
        assert "confined" in await refused(client, "list_drops")
        assert "needs scope admin" in await refused(
            client, "send_message", {"chat_jid": "a:x/1", "sender": "a:user/1", "content": "hi"}
        )
        added = await call(
            client, "add_route", {"seq": 1, "match": "platform=c", "target": "team/bot"}
        )
        assert added["id"] > 0
        assert (await call(client, "create_folder", {"path": "team/new"}))["path"] == "team/new"
        # set_routes replaces only the rows under team; the others stay.
        replaced = await call(
            client,
            "set_routes",
            {"rows": [{"seq": 5, "match": "platform=d", "target": "team/bot"}]},
        )
        assert [r["target"] for r in replaced["routes"]] == ["team/bot", "other", "main"]
        assert "outside team" in await refused(
            client, "set_routes", {"rows": [{"seq": 5, "target": "other"}]}
        )
    async with mcp_http(url, owner_token(data)) as owner:
        now = await table(owner)
        history = (await call(owner, "route_history"))["history"]
    assert [row for row in whole if row[2] != "team"] == [r for r in now if r[2] != "team/bot"]
    assert (5, "platform=d", "team/bot") in now
    assert history[0]["actor"] == "mcp:team-agent" and history[0]["action"] == "set:team"


async def test_a_read_token_sees_only_the_reading_tools_and_cannot_write(
    server: tuple[Gateway, str], data: Path
) -> None:
    gateway, url = server
    made = await gateway.services.tokens.add("watcher", scope="read", actor="t")
    async with mcp_http(url, made.secret) as client:
        assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
        before = await table(client)
        reason = await refused(client, "add_route", {"seq": 1, "target": "main"})
        assert reason == (
            "Token watcher has scope read; the tool add_route needs scope routes or more."
        )
        assert "scope admin" in await refused(client, "retry_job", {"id": 1})
        assert await table(client) == before


async def test_preview_lists_exactly_the_messages_whose_decision_changes(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    token = owner_token(data)
    async with mcp_http(url, token) as client:
        await call(client, "create_folder", {"path": "support"})
        catch_all = (await call(client, "list_routes"))["routes"][0]
        # A message nobody handles leaves a drop record without its text.
        await call(client, "delete_route", {"id": catch_all["id"]})
        lost = await post_message(url, token, "lost:room/3", "where am I")
        assert lost["seq"] is None
        await call(client, "add_route", {"seq": 9999, "match": "", "target": "main"})
        shop = await post_message(url, token, "shop:room/1", "x" * 300)
        await post_message(url, token, "other:room/2", "unaffected")
        await post_message(url, token, "shop:room/1", "@main")  # a sticky command: stays one
        rows = [
            {"seq": 0, "match": "platform=shop verb=message", "target": "support"},
            {"seq": 1, "match": "platform=lost", "target": "support#observe"},
            {"seq": 9999, "match": "", "target": "main"},
        ]
        preview = await call(client, "preview_routes", {"rows": rows})
        dry = await call(client, "set_routes", {"rows": rows, "dry_run": True})
        limited = await call(client, "preview_routes", {"rows": rows, "limit": 1})
        assert len(await table(client)) == 1  # nothing was written
    assert dry == preview
    assert preview["examined"] == 4 and preview["changed"] == 2
    by_id = {m["id"]: m for m in preview["messages"]}
    assert set(by_id) == {shop["id"], lost["id"]}
    moved = by_id[shop["id"]]
    assert moved["content"] == "x" * 200 and moved["chat_jid"] == "shop:room/1"
    assert moved["before"]["folder"] == "main" and moved["after"]["folder"] == "support"
    assert moved["after"]["action"] == "fire" and "row" in moved["after"]["reason"]
    dropped = by_id[lost["id"]]
    assert dropped["content"] is None
    assert (dropped["before"]["action"], dropped["after"]["action"]) == ("fire", "observe")
    assert limited["examined"] == 1


async def test_disengage_ends_an_engagement(server: tuple[Gateway, str], data: Path) -> None:
    _, url = server
    token = owner_token(data)
    chat = "shop:room/9"
    question = {"chat_jid": chat, "sender": "shop:user/1", "content": "next"}
    await post_message(url, token, chat, "hello")
    # The echo agent answers; delivering the answer engages the chat with main.
    await eventually(
        lambda: stored_rows(data, "SELECT folder FROM engagements WHERE chat_jid = ?", chat)
    )
    async with mcp_http(url, token) as client:
        assert (await call(client, "explain_route", question))["layer"] == "engagement"
        ended = await call(client, "disengage", {"chat_jid": chat})
        assert ended == {"chat_jid": chat, "ended": [{"topic": "", "folder": "main"}]}
        assert (await call(client, "explain_route", question))["layer"] == "route"
        again = await call(client, "disengage", {"chat_jid": chat, "topic": ""})
        assert again["ended"] == []
        assert "chat_jid" in await refused(client, "disengage", {"chat_jid": "no-colon"})
    assert stored_rows(data, "SELECT * FROM engagements WHERE chat_jid = ?", chat) == []


async def test_mcp_needs_a_token_and_one_of_this_servers_host_names(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        missing = await http.post("/mcp", json=request)
        wrong = await http.post("/mcp", json=request, headers={"Authorization": "Bearer nope"})
        auth = {"Authorization": f"Bearer {owner_token(data)}"}
        foreign = await http.post("/mcp", json=request, headers={**auth, "Host": "evil.example"})
        rebound = await http.post(
            "/mcp", json=request, headers={**auth, "Host": "evil.example:8484"}
        )
        own = await http.post("/mcp", json=request, headers=auth)
    for answer in (missing, wrong):
        assert answer.status_code == 401
        assert answer.json() == {"error": "Missing or wrong bearer token."}
    assert foreign.status_code == 421 and rebound.status_code == 421
    assert own.status_code == 200, own.text
    assert {t["name"] for t in own.json()["result"]["tools"]} == TOOLS


@pytest.fixture
def proxied(data: Path) -> Path:
    configure(data, '[mcp]\nallowed_hosts = ["postroom.example.org"]\n')
    return data


async def test_the_host_names_of_mcp_allowed_hosts_are_accepted(proxied: Path) -> None:
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {owner_token(proxied)}",
    }
    async with (
        running_gateway(proxied) as (_, url),
        httpx.AsyncClient(base_url=url, headers=headers) as http,
    ):
        named = await http.post("/mcp", json=request, headers={"Host": "postroom.example.org"})
        other = await http.post("/mcp", json=request, headers={"Host": "example.org"})
        origin = await http.post("/mcp", json=request, headers={"Origin": "https://evil.example"})
    assert named.status_code == 200, named.text
    assert other.status_code == 421
    assert origin.status_code == 403


def test_the_hosts_accepted_follow_the_configured_bind() -> None:
    assert allowed_hosts("127.0.0.1") == [
        "127.0.0.1",
        "127.0.0.1:*",
        "localhost",
        "localhost:*",
        "[::1]",
        "[::1]:*",
    ]
    assert allowed_hosts("::1")[:2] == ["[::1]", "[::1]:*"]
    assert allowed_hosts("0.0.0.0", ["gw.example"]) == [
        "0.0.0.0",
        "0.0.0.0:*",
        "gw.example",
        "gw.example:*",
    ]


@pytest.fixture
def turned_off(data: Path) -> Path:
    configure(data, "[mcp]\nenabled = false\n")
    return data


async def test_mcp_can_be_turned_off(turned_off: Path) -> None:
    async with running_gateway(turned_off) as (_, url), httpx.AsyncClient(base_url=url) as http:
        response = await http.post(
            "/mcp", json={}, headers={"Authorization": f"Bearer {owner_token(turned_off)}"}
        )
    assert response.status_code == 404


def test_postroom_mcp_refuses_to_start_when_turned_off(turned_off: Path) -> None:
    result = cli(turned_off, "mcp")
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: MCP is turned off in this data directory ([mcp] enabled = false)."
    )


# --------------------------------------------------------------------------- stdio


async def test_stdio_serves_the_same_tools_and_a_route_routes_the_next_message(
    server: tuple[Gateway, str], data: Path
) -> None:
    _, url = server
    token = owner_token(data)
    async with mcp_stdio(data) as client:
        assert {t.name for t in (await client.list_tools()).tools} == TOOLS
        await call(client, "create_folder", {"path": "support"})
        before = await table(client)
        assert "never closed" in await refused(
            client, "add_route", {"seq": 1, "match": "room=[ab", "target": "support"}
        )
        assert await table(client) == before
        added = await call(
            client, "add_route", {"seq": 0, "match": "platform=shop", "target": "support"}
        )
        # The running server sees the other process's write before the next message.
        routed = await post_message(url, token, "shop:room/1")
        assert routed["decision"]["folder"] == "support"
        assert routed["decision"]["route_id"] == added["id"]
        preview = await call(
            client, "preview_routes", {"rows": [{"seq": 0, "match": "", "target": "main"}]}
        )
        assert [m["id"] for m in preview["messages"]] == [routed["id"]]
        history = (await call(client, "route_history", {"limit": 1}))["history"]
    assert history[0]["actor"] == "mcp:stdio"


@pytest.fixture
def team(data: Path) -> Path:
    assert cli(data, "folders", "add", "team").exit_code == 0
    return data


async def test_stdio_can_be_narrowed_to_a_scope_and_a_folder(team: Path) -> None:
    async with mcp_stdio(team, "--scope", "routes", "--folder", "team") as client:
        assert "outside team" in await refused(client, "add_route", {"seq": 1, "target": "main"})
        assert (await call(client, "add_route", {"seq": 1, "target": "team"}))["id"] > 0
        assert await table(client) == [(1, "", "team")]
    async with mcp_stdio(team, "--scope", "read") as client:
        assert "needs scope routes" in await refused(client, "delete_route", {"id": 1})


def test_postroom_mcp_refuses_an_unknown_scope(data: Path) -> None:
    bad = cli(data, "mcp", "--scope", "root")
    assert bad.exit_code == 1
    assert bad.stderr.strip() == (
        "error: Unknown scope 'root'; the scopes are read, routes and admin."
    )
