"""One session's conversation: what ``record`` and ``prepare`` do with its messages.

The input made into messages to store (``incoming``), appended whole or recognised as a replay
(``writer``), open tool calls closed (``open_calls``), the recent window cached per session
(``recent``), one ``prepare`` (``preparing``), folding what left the window (``folding``, with
``queued_jobs`` so a burst queues one job), the reports kept for the inspector
(``kept_reports``), and what a ``Memory`` is made of, wired once from the settings (``wiring``).
"""
