"""Long-term memory cards: ``CardStore`` (``store``) wires its parts: the reads (``reads``), the
writes (``writes``), the one statement of a search (``queries``, ``search``), the keyword terms'
counts (``term_counts``), the current vectors read for retrieval (``vectors``), and the records
they hand out (``records``, ``rows``)."""
