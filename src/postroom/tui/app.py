"""``postroom chat``: a live, faithful view of one folder's conversations in the terminal.

The view is the token stream as stored: every chat routed to the folder, every message type
(traces collapsed, host notices, observed messages dimmed), as the server's ``/ws/tui`` socket
sends it. What the operator types goes to the operator chat ``tui:<folder>``, so steering
commands (``@child``, ``#topic``, ``/status``) work as in any chat. Nothing is drawn
optimistically: a sent message appears when the server has stored it.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Collapsible, Footer, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from postroom.tui.connection import BACKOFF_S, Connection, LinkState, LinkStatus
from postroom.tui.render import Rendered, render_message

__all__ = ["FolderPicker", "MessageItem", "PostroomTUI", "StreamingItem"]

Frame = dict[str, Any]
#: Jobs whose stored answer is shown, remembered so a late ``stream`` frame draws nothing.
ANSWERED_KEPT = 500


class MessageItem(Vertical):
    """One stored message: its label line and its content (a trace folds its content away)."""

    DEFAULT_CSS = """
    MessageItem {
        height: auto;
        padding: 0 1;
        margin: 0 0 1 0;
        border-left: tall $primary;
    }
    MessageItem.assistant { border-left: tall $success; }
    MessageItem.system { border-left: tall $warning; }
    MessageItem.tool-ok { border-left: tall $secondary; }
    MessageItem.tool-failed { border-left: tall $error; }
    MessageItem.host { border-left: tall $accent; color: $text-muted; }
    MessageItem.trace { border-left: none; margin: 0; }
    MessageItem.trace Collapsible { border-top: none; padding: 0; color: $text-muted; }
    MessageItem.observed { text-opacity: 55%; }
    """

    def __init__(self, message: Frame, rendered: Rendered) -> None:
        classes = rendered.kind + (" observed" if rendered.observed else "")
        super().__init__(classes=classes)
        self.message = message
        self.rendered = rendered

    def compose(self) -> ComposeResult:
        if self.rendered.kind == "trace":
            yield Collapsible(
                Static(self.rendered.body, classes="body"),
                title=escape(self.rendered.label.plain),
                collapsed=True,
            )
            return
        yield Static(self.rendered.label, classes="label")
        yield Static(self.rendered.body, classes="body")


class StreamingItem(Vertical):
    """An answer while the model writes it (``stream`` frames); the stored answer replaces it.

    Frames carry the shown text's length before their piece (``offset``): 0 starts over, and
    a frame that does not continue the text is one this view missed, so it waits for the
    stored answer instead.
    """

    DEFAULT_CSS = """
    StreamingItem {
        height: auto;
        padding: 0 1;
        margin: 0 0 1 0;
        border-left: tall $success 50%;
    }
    StreamingItem .label { text-style: italic; }
    """

    def __init__(self, frame: Frame, assistant_name: str) -> None:
        super().__init__()
        self.job_id = frame.get("job_id")
        self.chat_jid = str(frame.get("chat_jid") or "")
        self.text = ""
        message = {
            "message_type": "assistant",
            "chat_jid": self.chat_jid,
            "routed_to": frame.get("folder"),
            "content": "",
        }
        self._label = render_message(message, assistant_name=assistant_name).label
        self._label.append(" writing…", style="dim italic")

    def compose(self) -> ComposeResult:
        yield Static(self._label, classes="label")
        yield Static(Text(""), classes="body")

    def take(self, offset: int, piece: str) -> bool:
        """Add one frame's piece; False when it does not continue the text shown."""
        if offset == 0:
            self.text = piece
        elif offset == len(self.text):
            self.text += piece
        else:
            return False
        self.query_one(".body", Static).update(Text(self.text))
        return True


class FolderPicker(ModalScreen[str | None]):
    """The folders the server listed in its last hello; Enter switches, Escape goes back."""

    DEFAULT_CSS = """
    FolderPicker { align: center middle; }
    FolderPicker > Vertical {
        width: 60; height: auto; max-height: 80%;
        border: thick $primary; background: $surface; padding: 0 1;
    }
    FolderPicker OptionList { height: auto; max-height: 20; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Back")]

    def __init__(self, folders: Sequence[str], current: str) -> None:
        super().__init__()
        self._folders = list(folders)
        self._current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Switch to folder (Enter), Escape to stay")
            yield OptionList(
                *(Option(folder, id=folder) for folder in self._folders),
                markup=False,
                id="folders",
            )

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        if self._current in self._folders:
            options.highlighted = self._folders.index(self._current)
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class PostroomTUI(App[None]):
    """The terminal UI over a running ``postroom serve``."""

    TITLE = "postroom"
    ENABLE_COMMAND_PALETTE = False
    CSS = """
    #status { height: 1; padding: 0 1; background: $panel; }
    #status.connected { color: $success; }
    #status.connecting, #status.reconnecting { color: $warning; }
    #status.refused, #status.closed { color: $error; text-style: bold; }
    #log { height: 1fr; }
    #typing { height: 1; padding: 0 1; color: $text-muted; text-style: italic; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+c", "quit", "Quit", priority=True),
        Binding("ctrl+o", "pick_folder", "Folders", priority=True),
        Binding("q", "quit", "Quit", show=False),
        Binding("escape", "focus_log", "Scroll", show=False),
    ]

    def __init__(
        self,
        url: str,
        token: str,
        folder: str = "main",
        *,
        backoff_s: Sequence[float] = BACKOFF_S,
    ) -> None:
        super().__init__()
        self.url = url
        #: The folder shown and its operator chat (the server's hello confirms both).
        self.folder = folder
        self.chat_jid = f"tui:{folder}"
        self.folders: list[str] = []
        self.assistant = ""
        #: The last error the server answered a frame with (also shown as a notification).
        self.last_error: str | None = None
        self._typing: dict[str, str | None] = {}
        self._shown: set[tuple[str, str]] = set()
        #: Answers being written, by job id; and the jobs whose stored answer is shown.
        self._streams: dict[Any, StreamingItem] = {}
        self._answered: dict[Any, None] = {}
        self.connection = Connection(
            url=url,
            token=token,
            folder=folder,
            on_frame=self._on_frame,
            on_status=self._on_status,
            backoff_s=backoff_s,
        )

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Static(id="status", markup=False)
        yield VerticalScroll(id="log", can_focus=True)
        yield Static(id="typing", markup=False)
        yield Input(placeholder="Connecting…", id="input")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#input", Input).focus()
        self._on_status(self.connection.status)
        self._show_typing()
        self.run_worker(self.connection.run(), name="link", group="link")

    @property
    def link(self) -> LinkStatus:
        return self.connection.status

    def items(self) -> list[MessageItem]:
        """The messages on screen, in order."""
        return list(self.query_one("#log", VerticalScroll).query_children(MessageItem))

    def streams(self) -> list[StreamingItem]:
        """The answers being written, on screen."""
        return list(self.query_one("#log", VerticalScroll).query_children(StreamingItem))

    @property
    def status_text(self) -> str:
        return str(self.query_one("#status", Static).render())

    @property
    def typing_text(self) -> str:
        return str(self.query_one("#typing", Static).render())

    # -- the link ---------------------------------------------------------------------------
    def _on_status(self, status: LinkStatus) -> None:
        widget = self.query_one("#status", Static)
        widget.set_classes(status.state.value)
        widget.update(self._describe(status))
        if status.state is not LinkState.CONNECTED and self._typing:
            self._typing.clear()  # nobody tells us when a typing run ends while we are away
            self._show_typing()

    def _describe(self, status: LinkStatus) -> str:
        if status.state is LinkState.CONNECTED:
            # The link knows the greeted folder before the hello frame reaches the view.
            folder = self.connection.folder
            return f"● connected to {self.url} · folder {folder} · tui-user in tui:{folder}"
        if status.state is LinkState.CONNECTING:
            return f"◌ connecting to {self.url} (folder {self.connection.folder})…"
        if status.state is LinkState.RECONNECTING:
            if status.retry_in_s is None:
                return f"↻ reconnecting to {self.url} (attempt {status.attempt})…"
            return (
                f"↻ disconnected: {status.detail}; reconnecting in {status.retry_in_s:g}s "
                f"(attempt {status.attempt})"
            )
        return f"✖ not connected: {status.detail}"

    async def _on_frame(self, frame: Frame) -> None:
        kind = frame.get("type")
        if kind == "hello":
            await self._hello(frame)
        elif kind == "history":
            messages = frame.get("messages")
            await self._add([m for m in messages if isinstance(m, dict)] if messages else [])
        elif kind == "message" and isinstance(frame.get("message"), dict):
            await self._add([frame["message"]])
        elif kind == "stream":
            await self._stream(frame)
        elif kind == "typing":
            chat = str(frame.get("chat_jid"))
            if frame.get("active"):
                self._typing[chat] = frame.get("folder")
            else:
                self._typing.pop(chat, None)
            self._show_typing()
        elif kind == "error":
            self.last_error = str(frame.get("error"))
            self.notify(self.last_error, title="postroom", severity="error", markup=False)
        elif kind == "accepted":
            decision = frame.get("decision") or {}
            if decision.get("action") == "ignore" and decision.get("reason"):
                self.notify(str(decision["reason"]), title="not routed", markup=False)

    async def _hello(self, frame: Frame) -> None:
        self.folder = str(frame.get("folder") or self.folder)
        self.chat_jid = str(frame.get("chat_jid") or f"tui:{self.folder}")
        self.assistant = str(frame.get("assistant") or "")
        folders = frame.get("folders")
        self.folders = [str(f) for f in folders] if isinstance(folders, list) else []
        self._typing.clear()
        self._shown.clear()
        self._streams.clear()
        self._answered.clear()
        # Everything that names the folder changes before the first await, so no frame of
        # the screen shows the new folder in one place and the old one in another.
        self.query_one("#input", Input).placeholder = (
            f"Message {self.chat_jid} as tui-user — @child, #topic, /status… "
            "(Ctrl+O folders, Ctrl+C quit)"
        )
        self._on_status(self.connection.status)
        self._show_typing()
        # A hello starts the view over (a new connection or a switch): the history follows.
        await self.query_one("#log", VerticalScroll).remove_children()

    async def _add(self, messages: list[Frame]) -> None:
        items = []
        for message in messages:
            key = (str(message.get("id")), str(message.get("chat_jid")))
            if key in self._shown:
                continue
            self._shown.add(key)
            if message.get("message_type") == "assistant":
                self._typing.pop(str(message.get("chat_jid")), None)
                metadata = message.get("metadata")
                if isinstance(metadata, dict) and metadata.get("job_id") is not None:
                    await self._end_stream(metadata["job_id"], answered=True)
            rendered = render_message(message, assistant_name=self.assistant)
            items.append(MessageItem(message, rendered))
        if not items:
            return
        log = self.query_one("#log", VerticalScroll)
        await log.mount_all(items)
        log.scroll_end(animate=False)
        self._show_typing()

    async def _stream(self, frame: Frame) -> None:
        job = frame.get("job_id")
        if job is None or job in self._answered:
            return
        item = self._streams.get(job)
        if frame.get("done"):
            if frame.get("answer_id") is None:  # no answer: the text goes
                await self._end_stream(job, answered=False)
            return  # else the stored answer, when it comes, replaces it
        offset = frame.get("offset")
        piece = str(frame.get("text") or "")
        if not isinstance(offset, int) or (item is None and offset != 0):
            return
        log = self.query_one("#log", VerticalScroll)
        if item is None:
            item = StreamingItem(frame, self.assistant)
            self._streams[job] = item
            await log.mount(item)
        item.take(offset, piece)
        log.scroll_end(animate=False)

    async def _end_stream(self, job: Any, *, answered: bool) -> None:
        item = self._streams.pop(job, None)
        if answered:
            self._answered[job] = None
            if len(self._answered) > ANSWERED_KEPT:  # only late frames need it: keep the last
                del self._answered[next(iter(self._answered))]
        if item is not None:
            await item.remove()

    def _show_typing(self) -> None:
        widget = self.query_one("#typing", Static)
        if not self._typing:
            widget.update("")
            return
        who = self.assistant or "the assistant"
        widget.update(f"✍ {who} is typing in {', '.join(sorted(self._typing))}…")

    # -- input and keys ---------------------------------------------------------------------
    async def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value
        if not text.strip():
            return
        frame = {"type": "send", "client_id": uuid.uuid4().hex, "text": text}
        if await self.connection.send(frame):
            event.input.value = ""
        else:
            self.notify(
                "Not connected: the message was not sent (it stays in the input).",
                severity="warning",
            )

    def action_pick_folder(self) -> None:
        if isinstance(self.screen, FolderPicker):
            return
        if not self.folders:
            self.notify("The folder list arrives once connected.", severity="warning")
            return
        self.push_screen(FolderPicker(self.folders, self.folder), self._switch_to)

    async def _switch_to(self, folder: str | None) -> None:
        if not folder or folder == self.folder:
            return
        if not await self.connection.send({"type": "switch", "folder": folder}):
            # Not connected: the next connection opens the chosen folder.
            self.connection.folder = folder
            self.notify(f"Not connected: folder {folder} opens on reconnect.", severity="warning")

    def action_focus_log(self) -> None:
        self.query_one("#log", VerticalScroll).focus()
