"""Experiments: drivers that train and roll out policies into frozen, labelled runs for the studies.

Above the trainer and below the main job; ``analysis`` reads what they write and imports none of it.
"""
