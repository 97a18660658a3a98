"""Typed exceptions for ContractRL.

Every error a user can cause (a bad file, a bad schema, a bad config) derives from
:class:`ContractRLError`, so a command-line front end can turn any of them into a clear message
and exit status 2 without catching unrelated bugs.
"""

from __future__ import annotations


class ContractRLError(Exception):
    """Base class of every error caused by user input rather than by a bug."""


class InputFileError(ContractRLError):
    """A file given by the user is missing, unreadable, too large or not the JSON it should be."""


class SchemaCompileError(ContractRLError):
    """A JSON Schema cannot be compiled fail-closed (unknown keyword or format, bad $ref, too big).

    ``pointer`` locates the offending part of the schema (RFC 6901).
    """

    def __init__(self, message: str, pointer: str = "") -> None:
        super().__init__(f"{message} (at schema pointer {pointer!r})" if pointer else message)
        self.pointer = pointer


class ContractSpecError(ContractRLError):
    """A cross-field contract rule set is not well formed."""


class ConfigError(ContractRLError):
    """A configuration value is missing, unknown or out of its allowed range."""


class RayStartError(ContractRLError):
    """Ray could not be started or joined (a start-up timeout on an overloaded machine, a cluster
    address nobody answers at). Not the user's input as such, but the same one-line report fits:
    what failed, where its logs are, what to try."""
