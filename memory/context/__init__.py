"""The pure context engine: messages, units, tokens, budget, trim, cap, parts, assembler, report.

Nothing here does I/O (no database, no HTTP, no LLM; import-linter checks it), so it works alone
on plain lists of OpenAI-format message dicts, e.g. ``trim_history(messages, max_tokens=3_000)``.
"""
