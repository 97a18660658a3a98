"""One learner rank: the policy model (peft LoRA or full), its optimizer engine, and the updates.

A plain class, unit-tested in process; :mod:`contractrl.trainer.group` places one per rank in a Ray
actor (on a GPU when the cluster has them). The same object generates rollouts when the learner
and the generator are colocated, so the rollout side always samples from the weights it just
updated; :meth:`fingerprint` lets the trainer assert that it does.

Sequences are left-padded with explicit position ids, exactly as ``generate`` builds them, so the
log-probabilities of the update pass match the ones recorded at sampling time.
"""

from __future__ import annotations

import hashlib
import os
import random
import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, get_args

from ..errors import ConfigError
from ..rollout.cpu import compute_context, peak_resident_bytes, product_dtype, release_memory
from ..rollout.decode import custom_mask
from ..rollout.hf_policy import HFPolicy, SamplingConfig
from ..rollout.policies import Generation, Observation
from .adapter_base import describe_base, write_base
from .config import OptimConfig, Stage, TrainConfig
from .engine import DeepSpeedEngine, TorchEngine, TrainEngine
from .grpo import PolicySample, clipped_policy_loss
from .packing import PackedAnswers, pack_answers, packed_length
from .presets import load_model, model_path
from .ranking import SftExample

T = TypeVar("T")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def node_address() -> str:
    try:
        import ray

        if ray.is_initialized():
            return str(ray.util.get_node_ip_address())
    except ImportError:  # pragma: no cover - ray is a dependency
        pass
    return "127.0.0.1"


def _micro_batches(items: Sequence[T], size: int, order: Callable[[T], Any]) -> list[list[T]]:
    """Micro-batches of items adjacent under the sort key ``order`` (similar lengths: little
    padding); the loss is token-level, so order is free. A rank with nothing to do still gets one
    empty micro-batch, to join the gradient all-reduce."""
    ordered = sorted(items, key=order)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)] or [[]]


class Learner:
    """Holds the trainable policy of one data-parallel rank."""

    def __init__(self, config: TrainConfig, rank: int = 0, world_size: int = 1) -> None:
        import torch

        self.config = config
        self.rank = rank
        self.world_size = world_size
        if config.resources.learner_threads:
            torch.set_num_threads(config.resources.learner_threads)
        torch.manual_seed(config.seed + rank)
        random.seed(config.seed + rank)
        # Ray shows an actor only the GPUs it reserved (learner_gpus, or generator_gpus for the
        # separate generator), as device 0; an actor without one sees none and runs on the CPU
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        if self.device == "cuda":
            torch.cuda.set_device(0)
        model_cfg = config.model
        base, self.tokenizer = load_model(
            model_cfg.name, cache_dir=model_cfg.cache_dir, device=self.device, tiny=config.tiny, dtype=model_cfg.dtype
        )
        # named in every adapter this learner saves (base_model.json), instead of a cache path
        self._base_spec = model_cfg.name
        self._base_path = model_path(model_cfg.name, cache_dir=model_cfg.cache_dir, tiny=config.tiny)
        if model_cfg.gradient_checkpointing:
            base.gradient_checkpointing_enable()
        self.model = self._wrap_lora(base)
        self.bf16 = next(self.model.parameters()).dtype == torch.bfloat16
        self.engine: TrainEngine | None = None
        self.stage: str | None = None
        self._reference: Any = None

    # --- setup -------------------------------------------------------------------------------

    def rendezvous(self) -> tuple[str, int]:
        """Rank 0's address and a free port, for the ranks' process group."""
        return node_address(), free_port()

    def init_distributed(self, master: tuple[str, int] | None = None) -> None:
        """Join the ranks' process group (DeepSpeed needs one even for a single rank)."""
        import torch.distributed as dist

        if dist.is_initialized():
            return
        addr, port = master or ("127.0.0.1", free_port())
        backend = "nccl" if self.device == "cuda" else "gloo"
        os.environ.update(
            {
                "MASTER_ADDR": addr,
                "MASTER_PORT": str(port),
                "RANK": str(self.rank),
                "WORLD_SIZE": str(self.world_size),
                "LOCAL_RANK": "0",
            }
        )
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=self.rank, world_size=self.world_size)

    def _wrap_lora(self, base: Any) -> Any:
        lora = self.config.model.lora
        if not lora.enabled:
            for param in base.parameters():
                param.requires_grad_(True)
            return base
        from peft import get_peft_model

        return get_peft_model(base, peft_lora_config(lora, getattr(base.config, "num_hidden_layers", None)))

    def start_stage(self, stage: str, total_steps: int, optim: OptimConfig | None = None) -> None:
        """A fresh optimizer and schedule for ``stage``: ``optim``, as the stage object holds it
        (:mod:`.stages`), or by default the ``optim`` of the config section named like the stage
        (``sft.optim``, ``grpo.optim``), for callers that drive a learner without stage objects."""
        optim = optim if optim is not None else stage_optim(self.config, stage)
        if self.config.deepspeed.enabled:
            self.engine = DeepSpeedEngine(self.model, optim, total_steps, self.config.deepspeed, bf16=self.bf16)
        else:
            self.engine = TorchEngine(self.model, optim, total_steps)
        self.stage = stage
        self.model.train()

    def _require_engine(self) -> TrainEngine:
        if self.engine is None:
            raise RuntimeError("call start_stage() before training")
        return self.engine

    # --- generation ----------------------------------------------------------------------------

    def product_dtype(self) -> str:
        """The dtype this learner's matrix products run in (``model.cpu_bf16`` as this CPU honours it)."""
        return product_dtype(self.model, self.config.model.cpu_bf16)

    def generate(self, observations: Sequence[Observation], sampling: SamplingConfig) -> list[Generation]:
        import torch

        self.model.eval()
        policy = HFPolicy(self.model, self.tokenizer, sampling=sampling, name="learner", cpu_bf16=self.config.model.cpu_bf16)
        with torch.no_grad():
            out = policy.generate(list(observations))
        self.model.train()
        return out

    # --- updates -------------------------------------------------------------------------------

    def _batch_logprobs(
        self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], temperature: float, model: Any = None
    ) -> tuple[Any, Any]:
        """Right-aligned completion log-probs (batch, K) and their mask, for prompt+completion pairs."""
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(c) for _, c in pairs)
        length = max(len(p) + len(c) for p, c in pairs)
        ids = torch.full((len(pairs), length), pad, dtype=torch.long)
        attention = torch.zeros((len(pairs), length), dtype=torch.long)
        mask = torch.zeros((len(pairs), width), dtype=torch.float32)
        for row, (prompt, completion) in enumerate(pairs):
            seq = list(prompt) + list(completion)
            ids[row, length - len(seq) :] = torch.tensor(seq, dtype=torch.long)
            attention[row, length - len(seq) :] = 1
            mask[row, width - len(completion) :] = 1.0
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        device = next(self.model.parameters()).device
        ids, attention, positions, mask = ids.to(device), attention.to(device), positions.to(device), mask.to(device)
        forward = model if model is not None else (self.engine.engine if isinstance(self.engine, DeepSpeedEngine) else self.model)
        with compute_context(self.model, self.config.model.cpu_bf16):
            out = forward(
                input_ids=ids, attention_mask=attention, position_ids=positions, logits_to_keep=width + 1, use_cache=False
            )
        logits = out.logits[:, :-1, :].float() / temperature
        targets = ids[:, length - width :]
        logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return logprobs, mask

    def _group_logprobs(self, samples: Sequence[PolicySample], temperature: float) -> tuple[Any, Any]:
        """:meth:`_batch_logprobs` of the samples' (prompt, completion) pairs, with the completions
        that share a prompt packed after one copy of it (:mod:`.packing`): a GRPO group's episodes
        begin from one observation, so a micro-batch of its first turns held the same prompt once
        per member. Same values, up to float summation order."""
        import torch

        index: dict[tuple[int, ...], int] = {}
        completions: list[list[tuple[int, ...]]] = []  # per distinct prompt
        where: list[tuple[int, int] | None] = []  # each sample's (prompt, its place among that prompt's completions)
        for sample in samples:
            if not sample.completion_ids:
                where.append(None)  # nothing to score; its mask row stays empty
                continue
            prompt = index.setdefault(tuple(sample.prompt_ids), len(index))
            if prompt == len(completions):
                completions.append([])
            where.append((prompt, len(completions[prompt])))
            completions[prompt].append(tuple(sample.completion_ids))
        width = max(len(s.completion_ids) for s in samples)
        device = next(self.model.parameters()).device
        new = torch.zeros((len(samples), width), dtype=torch.float32, device=device)
        mask = torch.zeros((len(samples), width), dtype=torch.float32, device=device)
        if not completions:
            return new, mask
        examples = [SftExample(prompt, first, tuple(rest)) for prompt, (first, *rest) in zip(index, completions, strict=True)]
        packed = pack_answers(examples, self.tokenizer.pad_token_id)
        logprobs = self._packed_logprobs(packed, temperature)
        answer_of = packed.token_answer.to(device)
        for row, place in enumerate(where):
            if place is None:
                continue
            example, nth = place
            values = logprobs[answer_of == packed.answer_index[example][nth]]
            new[row, width - len(values) :] = values
            mask[row, width - len(values) :] = 1.0
        return new, mask

    def _packed_logprobs(self, packed: PackedAnswers, temperature: float = 1.0) -> Any:
        """The log-probability of every answer token of ``packed``, in its token order.

        The output head runs on the predicting positions only: a packed row's answers leave the
        other rows' prompt tails inside any window of trailing positions, and on a CPU the head
        over a 49k vocabulary, with its backward pass, cost half as much again as the transformer
        body on a whole-object batch of the main job. So this calls the body and the head itself (ZeRO
        stages 0-2 keep every weight whole, so DeepSpeed's forward wrapper adds nothing here)."""
        import torch

        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        param = next(self.model.parameters())
        implementation = getattr(base.config, "_attn_implementation", "sdpa")
        mask = custom_mask(packed.allowed, implementation, param.dtype)
        with compute_context(self.model, self.config.model.cpu_bf16):
            hidden = base.get_decoder()(
                input_ids=packed.input_ids.to(param.device),
                attention_mask=mask.to(param.device),
                position_ids=packed.position_ids.to(param.device),
                use_cache=False,
            ).last_hidden_state
            logits = base.get_output_embeddings()(
                hidden[packed.token_row.to(param.device), packed.token_predictor.to(param.device)]
            )
        targets = packed.token_target.to(param.device).unsqueeze(-1)
        return torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, targets).squeeze(-1)

    def sft_step(
        self,
        examples: Sequence[SftExample | tuple[Sequence[int], Sequence[int]]],
        token_denominator: float,
        pair_denominator: float = 0.0,
    ) -> dict[str, float]:
        """One optimizer step of token-level cross-entropy on answer tokens only, each answer's first
        token (ABSTAIN or a patch: the decision) weighted ``experimental.contrast.decision_weight``; the caller's
        ``token_denominator`` counts it with that weight (:func:`sft_token_weight`).

        Examples with negatives add ``experimental.ranking.weight`` times the mean over (gold, negative) pairs of
        ``softplus(margin - (log p(gold) - log p(negative)))``, summed log-probabilities of whole
        answers (:mod:`.ranking`), over ``pair_denominator`` pairs (the whole batch's, as the token
        denominator is); the negatives follow the gold answer after one copy of the prompt
        (:mod:`.packing`)."""
        import torch

        engine = self._require_engine()
        sft, ranking = self.config.sft, self.config.experimental.ranking
        items = [e if isinstance(e, SftExample) else SftExample(tuple(e[0]), tuple(e[1])) for e in examples]
        pairs_total = pair_denominator or sum(len(e.negatives) for e in items)
        chunks = _micro_batches(items, sft.micro_batch_size, packed_length)
        total = 0.0
        tokens = 0.0
        rank_sum = 0.0
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            if not chunk:
                engine.backward(self._zero_loss(), last=last)
                continue
            packed = pack_answers(chunk, self.tokenizer.pad_token_id)
            logprobs = self._packed_logprobs(packed)
            gold, first = packed.token_gold.to(logprobs.device), packed.token_first.to(logprobs.device)
            weights = gold.to(logprobs.dtype).masked_fill(first, self.config.experimental.contrast.decision_weight)
            loss = -(logprobs * weights).sum() / token_denominator
            total += float(loss.detach()) * token_denominator
            if pairs_total and len(packed.negative_owner):
                sums = torch.zeros(packed.answers, dtype=logprobs.dtype, device=logprobs.device)
                sums = sums.index_add(0, packed.token_answer.to(logprobs.device), logprobs)
                owners = packed.negative_owner.to(logprobs.device)
                gaps = sums[owners] - sums[len(chunk) :]
                rank = torch.nn.functional.softplus(ranking.margin - gaps).sum() / pairs_total
                loss = loss + ranking.weight * rank
                rank_sum += float(rank.detach()) * pairs_total
            engine.backward(loss, last=last)
            tokens += float(gold.sum())
        grad_norm = engine.step()
        release_memory()  # activations differ in size every step; see rollout/cpu.py
        return {
            "loss_sum": total,
            "rank_loss_sum": rank_sum,
            "tokens": tokens,
            "grad_norm": grad_norm,
            "lr": engine.lr(),
            "peak_rss_bytes": float(peak_resident_bytes()),
            **self._peak_gpu(),
        }

    def grpo_step(self, samples: Sequence[PolicySample], token_denominator: float) -> dict[str, float]:
        """One optimizer step of the clipped group-relative objective over ``samples``."""
        import torch

        engine = self._require_engine()
        grpo = self.config.grpo
        # a prompt's samples side by side, so that a micro-batch packs them after one copy of it
        chunks = _micro_batches(
            samples, grpo.micro_batch_size, lambda s: (len(s.prompt_ids), s.prompt_ids, len(s.completion_ids))
        )
        sums = {"policy_loss_sum": 0.0, "kl_sum": 0.0, "clipped_tokens": 0.0, "ratio_sum": 0.0, "tokens": 0.0, "loss_sum": 0.0}
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            if not chunk:
                engine.backward(self._zero_loss(), last=last)
                continue
            pairs = [(s.prompt_ids, s.completion_ids) for s in chunk]
            new, mask = self._group_logprobs(chunk, grpo.temperature)
            old = torch.zeros_like(new)
            for row, sample in enumerate(chunk):
                if sample.old_logprobs:
                    old[row, new.shape[1] - len(sample.old_logprobs) :] = torch.tensor(sample.old_logprobs)
            ref = self._reference_logprobs(pairs) if grpo.kl_coef > 0 else None
            advantages = torch.tensor([s.advantage for s in chunk], dtype=new.dtype, device=new.device)
            loss, parts = clipped_policy_loss(
                new,
                old,
                advantages,
                mask,
                clip_low=grpo.clip_low,
                clip_high=grpo.clip_high,
                token_denominator=token_denominator,
                ref_logprobs=ref,
                kl_coef=grpo.kl_coef,
            )
            engine.backward(loss, last=last)
            for key, value in parts.items():
                sums[key] += value
            sums["loss_sum"] += float(loss.detach()) * token_denominator
        sums["grad_norm"] = engine.step()
        sums["lr"] = engine.lr()
        release_memory()
        sums["peak_rss_bytes"] = float(peak_resident_bytes())
        sums.update(self._peak_gpu())
        return sums

    def _peak_gpu(self) -> dict[str, float]:
        """The most GPU memory torch has allocated on this rank so far (``peak_gpu_bytes``): on a
        GPU the resident set says nothing of the weights, activations and optimizer state. Nothing
        on a CPU, so CPU runs' metrics keep their columns."""
        if self.device != "cuda":
            return {}
        import torch

        return {"peak_gpu_bytes": float(torch.cuda.max_memory_allocated())}

    def _reference_logprobs(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Any:
        """Log-probs under the reference policy: the base model with the adapter switched off, or a
        frozen copy for full fine-tuning (affordable only for small models)."""
        import copy

        import torch

        with torch.no_grad():
            if hasattr(self.model, "disable_adapter"):
                with self.model.disable_adapter():
                    logprobs, _ = self._batch_logprobs(pairs, self.config.grpo.temperature, model=self.model)
                return logprobs
            if self._reference is None:
                self._reference = copy.deepcopy(self.model).eval()
                for param in self._reference.parameters():
                    param.requires_grad_(False)
            logprobs, _ = self._batch_logprobs(pairs, self.config.grpo.temperature, model=self._reference)
            return logprobs

    def _zero_loss(self) -> Any:
        """A loss with zero gradient that still joins the ranks' gradient all-reduce."""
        return sum(p.sum() * 0.0 for p in self.model.parameters() if p.requires_grad)

    # --- weights -------------------------------------------------------------------------------

    def trainable_state(self) -> dict[str, Any]:
        """The tensors a separate generator needs: the LoRA adapter, or every weight without LoRA."""
        if hasattr(self.model, "peft_config"):
            from peft import get_peft_model_state_dict

            state = get_peft_model_state_dict(self.model)
        else:
            state = self.model.state_dict()
        return {name: tensor.detach().cpu().clone() for name, tensor in state.items()}

    def load_trainable_state(self, state: dict[str, Any]) -> None:
        if hasattr(self.model, "peft_config"):
            from peft import set_peft_model_state_dict

            set_peft_model_state_dict(self.model, state)
        else:
            self.model.load_state_dict(state)

    def fingerprint(self) -> str:
        """SHA-256 of the trainable weights: equal fingerprints mean equal policies."""
        digest = hashlib.sha256()
        for name, tensor in sorted(self.trainable_state().items()):
            digest.update(name.encode())
            digest.update(tensor.float().numpy().tobytes())
        return digest.hexdigest()

    # --- checkpoints ---------------------------------------------------------------------------

    def save_checkpoint(self, directory: str | Path) -> None:
        """This rank's engine state and RNG; the driver's counters live in ``trainer_state.json``."""
        import torch

        rng = {"python": random.getstate(), "torch": torch.get_rng_state()}
        self._require_engine().save(Path(directory) / f"rank-{self.rank}", {"rng": rng})

    def load_checkpoint(self, directory: str | Path) -> None:
        import torch

        state = self._require_engine().load(Path(directory) / f"rank-{self.rank}")
        random.setstate(state["rng"]["python"])
        torch.set_rng_state(state["rng"]["torch"])

    def save_pretrained(self, directory: str | Path) -> str:
        """The adapter in peft format (load with ``PeftModel.from_pretrained``), or the full model. An
        adapter names its base by preset, source and hash (``base_model.json``), not by the path of
        this machine's model cache."""
        out = Path(directory)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        if hasattr(self.model, "peft_config"):
            write_base(out, describe_base(self._base_spec, self._base_path, self.config.tiny))
        return str(out)


def stage_optim(config: TrainConfig, stage: str) -> OptimConfig:
    """The optimizer settings of the config section a stage is named after."""
    optim = getattr(getattr(config, stage, None), "optim", None)
    if not isinstance(optim, OptimConfig):
        raise ConfigError(f"stage {stage!r} has no config section with an optim; the stages are {', '.join(get_args(Stage))}")
    return optim


def peft_lora_config(lora: Any, num_layers: int | None = None) -> Any:
    """The peft ``LoraConfig`` of the config tree's ``model.lora`` (one definition, shared with the
    TRL benchmark so both sides train the same adapter). ``num_layers`` is the model's depth, which
    ``lora.top_layers`` counts down from."""
    from peft import LoraConfig

    layers = None
    if lora.top_layers and num_layers is not None:
        layers = list(range(max(0, num_layers - lora.top_layers), num_layers))
    return LoraConfig(
        layers_to_transform=layers,
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=0.0,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
        bias="none",
    )


__all__ = ["Learner", "free_port", "node_address", "peft_lora_config", "stage_optim"]
