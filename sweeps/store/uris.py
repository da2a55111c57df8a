"""URIs in messages: which strings are URIs, and how secrets are kept out of what is printed.
Light on purpose (no pyarrow): every error message of the command line goes through `redact`."""

from __future__ import annotations

import os
import re

SECRET_VARIABLES = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS_JSON")
URI_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")


def is_uri(text: str | os.PathLike) -> bool:
    return isinstance(text, str) and bool(URI_SCHEME.match(text))


def redact(text: str) -> str:
    """`text` without secrets: the values of credential variables, query strings and user info of URIs."""
    for name in SECRET_VARIABLES:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    text = re.sub(r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/\s@]*@", r"\1***@", text)  # user:password@
    return re.sub(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s?]*)\?[^\s'\"]*", r"\1?***", text)
