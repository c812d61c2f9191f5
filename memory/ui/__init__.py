"""``stratamem ui``: a local page that shows what the model saw and what it remembers.

Users and their sessions; a session's messages (paged, with the summary's boundary) and each
request's kept report (tokens per layer as a chart, what the cap dropped and why, what was
recalled with which scores); a user's cards by type with their dates, validity, sources and
supersede chains, and ``Memory.search``; the summary's versions; pin, unpin, forget a card,
forget a user, each asked first and done through ``Memory``. Server-rendered HTML and inline
SVG: no script, no CDN, no build step.
"""

from memory.ui.app import CONTENT_SECURITY_POLICY, create_app

__all__ = ["CONTENT_SECURITY_POLICY", "create_app"]
