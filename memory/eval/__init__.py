"""Evaluation, pure (no database, no model, no console): LoCoMo (``locomo``), recall at equal
token budgets (``equal_budgets``) and knowledge updates (``knowledge_updates``). The commands
that run them are ``stratamem eval`` (``memory.cli``)."""
