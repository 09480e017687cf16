"""The revisions, v1 to the head, one per schema version."""
