"""ContractRL: train and run tool-call repair policies under a fail-closed JSON contract."""

__version__ = "0.1.0"
