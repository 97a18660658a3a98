"""Tasks: where repair cases come from (tool catalogs, public data sets, corruptions)."""
