"""Prompt length in tokens: the target's tokenizer where known, else a documented estimate.

The estimate is ``ceil(characters / 4)``, OpenAI's rule of thumb for English text (code and
non-Latin scripts run denser, so it undercounts them). Chat messages are counted over the
concatenated text of their contents plus 4 tokens a message for the chat template's framing.

The seam: every function that counts takes ``token_counter``, any ``Callable[[str], int]``.
``hf_token_counter(tokenizer)`` wraps a Hugging Face tokenizer for the experiments code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

TokenCounter = Callable[[str], int]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD_TOKENS = 4
ESTIMATE_NAME = "estimate: ceil(chars/4) + 4 per chat message"


def estimate_tokens(text: str) -> int:
    """Estimated tokens in ``text``: ceil(chars / 4)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def hf_token_counter(tokenizer: Any) -> TokenCounter:
    """A counter from a Hugging Face tokenizer (no special tokens added)."""

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False))

    return count


def message_text(content: Any) -> str:
    """The text of one chat message's ``content`` (a string or a list of OpenAI content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_tokens(
    *, prompt: str | None, messages: list | None, token_counter: TokenCounter | None = None
) -> int:
    """Tokens in a request's input (prompt text, or chat messages with per-message framing)."""
    count = token_counter or estimate_tokens
    if messages:
        total = 0
        for m in messages:
            if isinstance(m, dict):
                total += count(message_text(m.get("content"))) + MESSAGE_OVERHEAD_TOKENS
        return total
    return count(prompt or "")
