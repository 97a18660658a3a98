"""A candidate-selection policy for the CR-MDP, trained with RLlib PPO (no language model).

The repair MDP has a legal-action mask; a small network that chooses among enumerated candidate
repairs (:mod:`.candidates`) answers two questions the LM arms cannot: is a language model needed
for a family at all, and what does a repair gate cost when it runs in microseconds. The pieces:

- :mod:`.candidates`: ABSTAIN and small patches built from the report, the request and the schema;
- :mod:`.features`, :mod:`.observe`: fixed-size encodings and the contract's own action mask;
- :mod:`.env`: the Gymnasium environment (``contractrl/Selector-v0``) over the same RepairEnv;
- :mod:`.module`: the masked RLlib RLModule; :mod:`.train`: PPO with env runners as Ray actors;
- :mod:`.policy`: a trained selector as a rollout policy (``--policy selector:PATH``).

RLlib and Gymnasium are imported by the modules that need them, not here.
"""
