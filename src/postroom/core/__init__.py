"""The domain of postroom: pure functions and values, no I/O.

JIDs, messages and their types, route matching and targets, steering, and the resolution of one
message to a :class:`Decision`. Nothing here imports another postroom package, touches a file,
a socket or a clock, or reads configuration: callers pass everything in.
"""

from postroom.core.annotate import RouteAnnotation, annotate_routes, fires_on
from postroom.core.chunking import chunk_text, limit_for
from postroom.core.context import (
    ContextMessage,
    ToolCall,
    arrange_history,
    format_messages_for_sdk,
    render_system_prompt,
    system_notices,
)
from postroom.core.decision import (
    EMPTY_CHAT,
    Action,
    ChatState,
    Command,
    CommandKind,
    Decision,
    DropReason,
    Engagement,
    Layer,
    ReplyTarget,
    RoutingMessage,
)
from postroom.core.display import display_text
from postroom.core.errors import (
    ConfigError,
    Conflict,
    FolderNameError,
    Forbidden,
    InvalidInput,
    JidError,
    MatchSyntaxError,
    NotFound,
    PostroomError,
    TargetSyntaxError,
    TooLarge,
)
from postroom.core.folders import ancestors, is_within, parent_of, validate_folder
from postroom.core.formatting import format_for
from postroom.core.glob import Pattern, compile_pattern
from postroom.core.jid import Jid, make_jid, parse_jid, split_jid
from postroom.core.match import KEYS, MatchExpr, MatchFields, fields_of, parse_match
from postroom.core.messages import (
    CONTEXT_TYPES,
    Attachment,
    InboundMessage,
    MessageType,
    Sender,
    StoredMessage,
    Verb,
    is_from_gateway,
    type_for_sender,
)
from postroom.core.resolution import resolve
from postroom.core.route_index import Hit, Route, RouteIndex
from postroom.core.schedule import Schedule, ScheduleError, parse_schedule
from postroom.core.steering import Steering, SteeringKind, normalize_topic, parse_steering
from postroom.core.tags import TagResult, process_tags
from postroom.core.target import Mode, Target, parse_target, sender_slug
from postroom.core.trigger import Trigger, effective_verb

__all__ = [
    "CONTEXT_TYPES",
    "EMPTY_CHAT",
    "KEYS",
    "Action",
    "Attachment",
    "ChatState",
    "Command",
    "CommandKind",
    "ConfigError",
    "Conflict",
    "ContextMessage",
    "Decision",
    "DropReason",
    "Engagement",
    "FolderNameError",
    "Forbidden",
    "Hit",
    "InboundMessage",
    "InvalidInput",
    "Jid",
    "JidError",
    "Layer",
    "MatchExpr",
    "MatchFields",
    "MatchSyntaxError",
    "MessageType",
    "Mode",
    "NotFound",
    "Pattern",
    "PostroomError",
    "ReplyTarget",
    "Route",
    "RouteAnnotation",
    "RouteIndex",
    "RoutingMessage",
    "Schedule",
    "ScheduleError",
    "Sender",
    "Steering",
    "SteeringKind",
    "StoredMessage",
    "TagResult",
    "Target",
    "TargetSyntaxError",
    "TooLarge",
    "ToolCall",
    "Trigger",
    "Verb",
    "ancestors",
    "annotate_routes",
    "arrange_history",
    "chunk_text",
    "compile_pattern",
    "display_text",
    "effective_verb",
    "fields_of",
    "fires_on",
    "format_for",
    "format_messages_for_sdk",
    "is_from_gateway",
    "is_within",
    "limit_for",
    "make_jid",
    "normalize_topic",
    "parent_of",
    "parse_jid",
    "parse_match",
    "parse_schedule",
    "parse_steering",
    "parse_target",
    "process_tags",
    "render_system_prompt",
    "resolve",
    "sender_slug",
    "split_jid",
    "system_notices",
    "type_for_sender",
    "validate_folder",
]
