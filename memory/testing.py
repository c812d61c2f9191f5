"""Fakes for testing an application built on stratamem, without an LLM or a model download.

``ScriptedChatModel`` answers a chat model's requests from a script (and records them);
``HashingEmbedder`` embeds without a model (``cards={"embedder": "hashing"}`` selects it in
``Memory.open``). Both are what stratamem's own tests use.
"""

from memory.chat_models import ScriptedChatModel
from retrieval import HashingEmbedder

__all__ = ["HashingEmbedder", "ScriptedChatModel"]
