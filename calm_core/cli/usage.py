"""The one error a command raises for a request it cannot carry out as asked (two flags
that exclude each other, a flag that needs another): `calm` prints it as one line."""


class UsageError(Exception):
    """A problem with what the user asked for; printed as one line."""
