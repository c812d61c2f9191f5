"""Background jobs as this process runs them: consolidation and cards jobs (``consolidation``),
the worker loop that claims them (``worker``) and its idle work (``idle_work``). The queue itself
is ``storage.job_queue``."""
