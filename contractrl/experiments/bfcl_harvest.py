"""Harvesting natural failures: a project model answers BFCL questions zero-shot, and its answers
are written as ``bfcl generate`` writes them, for the ``bfcl-results:DIR`` source to read.

The model sees BFCL's default prompt for prompting models (the classic style, plain text, the
functions as indented JSON, answers as a Python call list ``[f(a=1)]``) and answers greedily, so
the same model and questions give the same file. Answers go to
``<out>/result/<model>/<non_live|live>/BFCL_v4_<category>_result.json``, one JSON line per question
with ``id``, ``result`` (the raw answer) and the token counts; no timing is recorded, so the file
is reproducible. No score file is written: a score file is BFCL's own verdict, and the source
recomputes the verdict by BFCL's acceptance when none is given (tasks/natural.py).

The default place is ``<data cache>/bfcl-results/<model>`` (``runs/data/bfcl-results/smollm2``
unless ``$CONTRACTRL_DATA_CACHE`` says otherwise), beside the BFCL data the questions come from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..rollout.cpu import compute_context
from ..rollout.prompts import render_prompt
from ..tasks.bfcl import BfclEntry, load_bfcl
from ..tasks.bfcl_wheel import CATEGORIES, HELD_OUT, cache_dir, category_dir
from ..trainer.presets import load_model

# the categories whose answers are Python call lists (the Java and JavaScript ones are not)
HARVESTABLE: tuple[str, ...] = tuple(c for c in CATEGORIES if c not in ("simple_java", "simple_javascript"))
NON_LIVE: tuple[str, ...] = tuple(c for c in HARVESTABLE if c not in HELD_OUT)

# BFCL's default system prompt (ret_fmt=python, no tool-call tag, func_doc_fmt=json, plaintext, classic)
_PERSONA = "You are an expert in composing functions."
_TASK = (
    "You are given a question and a set of possible functions. Based on the question, you will need to make one or "
    "more function/tool calls to achieve the purpose. If none of the functions can be used, point it out. If the given "
    "question lacks the parameters required by the function, also point it out."
)
_FORMAT = (
    "You should only return the function calls in your response.\n\nIf you decide to invoke any of the function(s), you "
    "MUST put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...), "
    "func_name2(params)].  You SHOULD NOT include any other text in the response."
)
_TURNS = (
    "At each turn, you should try your best to complete the tasks requested by the user within the current turn. "
    "Continue to output functions to call until you have fulfilled the user's request to the best of your ability. "
    "Once you have no more functions to call, the system will consider the current turn complete and proceed to the "
    "next turn or task."
)


@dataclass(frozen=True)
class HarvestConfig:
    """Which model answers which questions, and where the answers go."""

    model: str = "smollm2"  # a preset (tiny, smollm2), hf:<name-or-path> or a model directory
    categories: tuple[str, ...] = ("simple",)
    limit: int = 40  # questions per category, the first ones in the data's order
    max_new_tokens: int = 128
    batch_size: int = 8
    out: str = ""  # default: <data cache>/bfcl-results/<model>
    model_cache: str | None = None  # where presets are built (default trainer.model_cache.MODELS_DIR)

    def __post_init__(self) -> None:
        unknown = [c for c in self.categories if c not in HARVESTABLE]
        if unknown or not self.categories:
            raise ConfigError(f"cannot harvest categories {unknown}; choose from {', '.join(HARVESTABLE)}")
        if self.limit < 1 or self.max_new_tokens < 1 or self.batch_size < 1:
            raise ConfigError("limit, max_new_tokens and batch_size must be >= 1")

    @property
    def model_name(self) -> str:
        """The run's folder name: the preset, or the last part of a path or hub name."""
        name = self.model[3:] if self.model.startswith("hf:") else self.model
        return re.sub(r"[^A-Za-z0-9_.-]", "_", Path(name.rstrip("/")).name) or "model"

    def out_dir(self) -> Path:
        return Path(self.out) if self.out else cache_dir() / "bfcl-results" / self.model_name


def functions_prompt(functions: list[dict[str, Any]]) -> str:
    """BFCL's system prompt for ``functions`` (``{name, description, parameters}`` each)."""
    tools = f"Here is a list of functions in json format that you can invoke.\n{json.dumps(functions, indent=4)}\n"
    return f"{_PERSONA}{_TASK}\n\n{_FORMAT}\n\n{_TURNS}\n\n{tools}"


def system_prompt(entry: BfclEntry) -> str:
    return functions_prompt([{"name": f.name, "description": f.description, "parameters": f.parameters} for f in entry.functions])


def messages(entry: BfclEntry) -> list[dict[str, str]]:
    """The first turn of the question with BFCL's system prompt in front (merged into one given there)."""
    turns = entry.question[0] if entry.question and isinstance(entry.question[0], list) else list(entry.question)
    chat = [{"role": str(t.get("role", "user")), "content": str(t.get("content", ""))} for t in turns if isinstance(t, dict)]
    prompt = system_prompt(entry)
    if chat and chat[0]["role"] == "system":
        return [{"role": "system", "content": prompt + "\n\n" + chat[0]["content"]}, *chat[1:]]
    return [{"role": "system", "content": prompt}, *chat]


def result_path(out: Path, model_name: str, category: str) -> Path:
    """Where ``bfcl generate`` puts a category's answers: ``result/<model>/<group>/BFCL_v4_<test category>_result.json``."""
    group = "live" if category in HELD_OUT else "non_live"
    test_category = CATEGORIES[category][len("BFCL_v4_") : -len(".json")]
    return out / "result" / model_name / group / f"BFCL_v4_{test_category}_result.json"


def greedy_replies(
    model: Any, tokenizer: Any, chats: list[list[dict[str, str]]], max_new_tokens: int
) -> list[tuple[str, int, int]]:
    """Each chat's greedy answer as one left-padded batch: (text up to EOS, prompt tokens, answer tokens)."""
    import torch

    prompts = [render_prompt(chat, tokenizer) for chat in chats]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
    with torch.no_grad(), compute_context(model):
        out = model.generate(
            **enc,
            max_new_tokens=max_new_tokens,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    width = enc["input_ids"].shape[1]
    replies = []
    for row, prompt_tokens in zip(out[:, width:].tolist(), enc["attention_mask"].sum(dim=1).tolist(), strict=True):
        ids = row[: row.index(tokenizer.eos_token_id)] if tokenizer.eos_token_id in row else row
        ids = [i for i in ids if i != tokenizer.pad_token_id]
        replies.append((tokenizer.decode(ids, skip_special_tokens=True).strip(), int(prompt_tokens), len(ids)))
    return replies


def _answer(model: Any, tokenizer: Any, entries: list[BfclEntry], max_new_tokens: int) -> list[dict[str, Any]]:
    replies = greedy_replies(model, tokenizer, [messages(e) for e in entries], max_new_tokens)
    return [
        {"id": entry.id, "result": text, "input_token_count": prompt_tokens, "output_token_count": answer_tokens}
        for entry, (text, prompt_tokens, answer_tokens) in zip(entries, replies, strict=True)
    ]


def questions(config: HarvestConfig, category: str) -> list[BfclEntry]:
    """The questions of ``category`` that ``config`` answers: its first ``config.limit``."""
    return load_bfcl(category_dir(category) / CATEGORIES[category])[: config.limit]


def harvest(config: HarvestConfig, progress: Any = None) -> dict[str, Any]:
    """Answer the first ``config.limit`` questions of each category and write the result files.

    Returns where each file went and how many answers it holds. ``progress`` is called with the
    number of answers written after each batch (a progress bar's ``update``).
    """
    model, tokenizer = load_model(config.model, cache_dir=config.model_cache)
    out = config.out_dir()
    files: dict[str, Any] = {}
    for category in config.categories:
        entries = questions(config, category)
        rows: list[dict[str, Any]] = []
        for start in range(0, len(entries), config.batch_size):
            batch = entries[start : start + config.batch_size]
            rows.extend(_answer(model, tokenizer, batch, config.max_new_tokens))
            if progress is not None:
                progress(len(batch))
        path = result_path(out, config.model_name, category)
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_suffix(".json.part")
        scratch.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        scratch.replace(path)
        files[category] = {"path": str(path), "answers": len(rows)}
    spec = ("bfcl-results-live:" if set(config.categories) <= set(HELD_OUT) else "bfcl-results:") + str(out)
    return {"model": config.model, "out": str(out), "source": spec, "files": files}


__all__ = [
    "HARVESTABLE",
    "NON_LIVE",
    "HarvestConfig",
    "functions_prompt",
    "greedy_replies",
    "harvest",
    "messages",
    "questions",
    "result_path",
    "system_prompt",
]
