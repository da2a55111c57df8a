"""The one error type of the cluster layer, importable without Ray (the CLI catches it)."""


class ClusterError(RuntimeError):
    """The cluster cannot be reached or used; the message says what to do."""
