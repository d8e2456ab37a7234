"""The Learn page: overconfidence, live, and its temperature slider."""
