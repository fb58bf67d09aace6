"""Matrix: rooms ``matrix:room/<room_id>``, senders ``matrix:user/<mxid>``, threads as topics."""

from postroom.channels.matrix.channel import MatrixChannel, MatrixError, build
from postroom.channels.matrix.config import MatrixConfig

__all__ = ["MatrixChannel", "MatrixConfig", "MatrixError", "build"]
