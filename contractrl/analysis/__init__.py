"""Offline analysis: the only code that joins frozen ledgers to the offline half of cases."""
