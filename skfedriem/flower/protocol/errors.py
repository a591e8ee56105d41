"""What a deployed site tells the server when it cannot take part: the kind of failure, never its details.

Light (Flower and the standard library), so that the site's light ClientApp
(:mod:`skfedriem.flower.deployment.site_client`) answers its own failures with the same
words as the site app it hands messages to.
"""

from __future__ import annotations

from flwr.app import Error, Message
from flwr.common.constant import ErrorCode

__all__ = ["FAILED", "error_reply"]

#: The reply of a site that could not take part for any reason but a refusal: the reason is in its own log
#: (an error's text may quote a record's value, a label, the site's paths or its account).
FAILED = "the site could not take part (the reason is in the site's own log)"


def error_reply(msg: Message, reason: str) -> Message:
    """The error reply to ``msg`` with ``reason`` (and no content)."""
    return Message(error=Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
