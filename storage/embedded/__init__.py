"""The embedded Postgres: the server of a data folder (``server``), who may connect to it
(``access``), the processes using it (``clients``), the account and programs it runs as
(``programs``), and a copy of the programs root can run them from (``install``)."""
