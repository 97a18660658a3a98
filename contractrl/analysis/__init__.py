"""Offline analysis: frozen ledgers in; parquet tables, plots and an HTML report out.

It scores episodes through the evidence layer's judge and never trains or rolls out (that is
``contractrl.experiments``).
"""
