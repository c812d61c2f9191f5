"""Framework stores' items: ``ItemStore`` (``store``), its records (``records``) and the
statement that ranks them (``search``)."""
