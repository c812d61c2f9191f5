"""Adapters to the frameworks people already program against, one module per framework.

Each is a thin layer over the public ``Memory`` API and imports its framework, so a module is
imported only by whoever uses it (``from memory.integrations.langgraph import StratamemStore``)
and its framework comes with the matching extra (``pip install stratamem[langgraph]``).
"""

__all__: list[str] = []
