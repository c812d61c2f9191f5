"""Sessions' messages: ``MessageStore`` (``store``), the statements of its append transaction
(``appends``), reads of the messages table (``reads``), and the statements that store or load
what a request needs in one round trip (``request_statements``)."""
