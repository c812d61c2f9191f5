"""Export and import of a user as JSON Lines: the format (``format``) and the two directions
(``export_import``)."""
