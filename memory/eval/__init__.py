"""Evaluation: LoCoMo (``locomo``), recall at equal token budgets (``equal_budgets``),
answer in text (``answers``) and knowledge updates (``knowledge_updates``), pure (no
database, no model, no console); and the offline ``Memory`` the runs build (``offline``). The
commands that run them are ``stratamem eval`` (``memory.cli``)."""
