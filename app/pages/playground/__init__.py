"""The Playground page: one question asked of the trained variants."""
