"""Long-term memory: a user's cards (and framework items), beyond any one session's window.

``LongTermMemory`` (``long_term_memory``) holds the ``MessageArchiver`` that archives stored
messages as cards (``archiving``),
stores extracted cards and applies supersede decisions (``card_lifecycle``), recalls with facts
that changed marked (``validity``), the memories priced in the prompt's tokens
(``recalled_memories``), and keeps pins; ``summary_and_cards`` is the fold's one model
call for the new summary and the folded messages' cards; ``items`` the namespaced JSON items of
framework stores. The judgment it applies (extraction, supersede, query rewriting) is
``memory.cards``; it sits below sessions and jobs and above ``memory.summary`` and
``memory.cards``.
"""
