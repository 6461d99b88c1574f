"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class RstfError(Exception):
    """A problem with the user's input or environment, reported as one line, no traceback."""
