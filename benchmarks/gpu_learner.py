"""``contractrl train`` itself (Ray learner actor, DeepSpeed engine, bf16, LoRA) on the lent GPU
machine, which has torch, transformers and peft but not Ray, DeepSpeed or the project's other
dependencies, can fetch nothing, and takes at most 64 MiB a call (issue 48, section 3).

``prepare`` (here) builds a wheelhouse of what the trainer needs beyond torch, transformers, peft and
their own dependencies (pinned to ``constraints.txt``, for the device's Python; DeepSpeed, an sdist,
built here as a pure-Python wheel with ``DS_BUILD_OPS=0``), lays it and the model wheels end to end
(stage ``base``: the wheelhouse and smollm2; stage ``qwen2.5-coder-0.5b``: its six chunk wheels),
cuts the stream into parts with a SHA-256 per part and per file (:mod:`contractrl.carry`), puts one
part per call folder ``.gpu/cNN/`` and prints the call plan. There, each call's ``stash`` copies its
part out of the repository (a later call's ``carry`` of ``.gpu/...`` replaces the whole ignored
folder) into ``/tmp/gpu`` and checks it; ``run`` rebuilds the files, checks every hash and the
Python version, installs the wheelhouse into ``/tmp/gpu/site`` (never the system site-packages), and
from a bare venv that sees it and the device's own torch (``/tmp/gpu/venv``) runs ``python -m
contractrl train`` (``stages=[sft]``, a few steps, ``resources.learner_gpus=1`` on
a GPU, bf16 weights there by ``model.dtype=auto``, DeepSpeed wrapping torch's AdamW, so no optimizer
op is JIT-compiled), then writes step time, tokens/s, peak GPU memory and the run's ``metrics.parquet``
to ``--out``. Without a GPU the same path runs on the CPU (how it is tested here).

    python benchmarks/gpu_learner.py prepare --out .gpu                 # here; prints the plan
    python3 benchmarks/gpu_learner.py stash .gpu/c01                    # there, one call per part
    python3 benchmarks/gpu_learner.py stash .gpu/c05 && \\
        python3 benchmarks/gpu_learner.py run --model smollm2 --out $OUT # the call completing a stage

``run`` imports nothing from the package but :mod:`contractrl.carry` (standard library only) before
the wheelhouse is installed; the trainer runs in a child process with it on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # contractrl.carry, before anything is installed there

from contractrl.carry import CarryError, check_part, join, missing_parts, plan_calls, read_manifest, split  # noqa: E402

# what `contractrl train` imports (the trainer, the validators, the rollout, tracking) beyond the
# device's own torch, transformers and peft; Ray without extras: a local instance, no dashboard
REQUIREMENTS = (
    "ray",
    "deepspeed",
    "jsonschema-rs",
    "jsonschema[format-nongpl]",
    "pyarrow",
    "gguf",
    "wandb",
    "pyyaml",
    "regex",
    "tqdm",
)
DEVICE_HAS = ("torch", "transformers", "peft")
# the device image's packages, as the workplace's list of them read on 2026-11-17: of the closure of
# DEVICE_HAS computed here, only these are taken to be there (its transformers is older than ours
# and lacks pydantic, which DeepSpeed needs)
DEVICE_IMAGE = tuple(
    """
    absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
    charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
    cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax
    fonttools formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
    hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2
    joblib kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
    markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch
    mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
    nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver
    nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13
    nvidia-nvtx onnx onnx-ir onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
    orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client propcache
    protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks pyre-extensions pytest
    pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist python-dateutil pytorch-lightning pyyaml regex
    requests rich sacrebleu safetensors scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
    sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
    tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch torchaudio
    torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope triton typer typing-extensions
    typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split()  # noqa: SIM905 (the list as the workplace prints it)
)
# the device's Python (/work/.library/device/KINDS.md: "python3 is Python 3.12.3")
DEVICE_PYTHON = "3.12"
MANYLINUX = [f"manylinux_2_{n}_x86_64" for n in (17, 24, 26, 27, 28, 31, 34, 35)] + ["manylinux2014_x86_64", "manylinux1_x86_64"]
LIMIT = 64 << 20  # a call's working tree and carried paths together
MAX_PART = 60 << 20
STAGES = {"smollm2": ("base",), "qwen2.5-coder-0.5b": ("base", "qwen2.5-coder-0.5b")}
WORK = Path("/tmp/gpu")


# --- prepare (here) ---------------------------------------------------------------------------------


def _canon(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _pins(constraints: Path) -> dict[str, str]:
    pins = {}
    for line in constraints.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_canon(name)] = version.strip()
    return pins


def _closure_here(roots: tuple[str, ...]) -> set[str]:
    """The installed dependency closure of ``roots`` in this interpreter (the device's own stack)."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen, todo = set(), [_canon(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for line in requires:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(_canon(req.name))
    return seen


def _requires(wheel: Path, extras: set[str], python: str) -> list[tuple[str, set[str]]]:
    """A wheel's requirements that apply on the device (Linux x86-64, its Python, these extras)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode("utf-8", "replace")
    env = {"python_version": python, "python_full_version": f"{python}.0", "sys_platform": "linux"}
    env |= {"platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix", "implementation_name": "cpython"}
    out = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in (extras or {""})):
            out.append((_canon(req.name), set(req.extras)))
    return out


def _download(pinned: dict[str, str], python: str, into: Path) -> dict[str, Path]:
    """The wheels of ``{name: version}`` for the device's Python and platform, in one pip call."""
    tags = [arg for plat in MANYLINUX for arg in ("--platform", plat)]
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", python]
    command += ["--implementation", "cp", "--abi", f"cp{python.replace('.', '')}", "--abi", "abi3", "--abi", "none", *tags]
    subprocess.run([*command, "-d", str(into), *(f"{n}=={v}" for n, v in pinned.items())], check=True)
    found = {}
    for wheel in into.glob("*.whl"):
        name, version = _canon(wheel.name.split("-")[0]), wheel.name.split("-")[1]
        if pinned.get(name) == version:
            found[name] = wheel
    lost = sorted(set(pinned) - set(found))
    if lost:
        raise SystemExit(f"pip download gave no wheel for {', '.join(lost)} (CPython {python}, manylinux x86-64)")
    return found


def _deepspeed(version: str, into: Path) -> Path:
    """DeepSpeed is an sdist: a pure-Python wheel with no ops compiled (they would JIT; none are used)."""
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(into), f"deepspeed=={version}"], env=env, check=True
    )
    return next(into.glob(f"deepspeed-{version}-*.whl"))


def wheelhouse(into: Path, constraints: Path, python: str) -> list[Path]:
    """Every wheel ``REQUIREMENTS`` pulls in on the device, minus what torch, transformers and peft
    pull in and the device image has, each pinned by ``constraints``; a requirement without a pin is
    refused."""
    pins, have = _pins(constraints), _closure_here(DEVICE_HAS) & {_canon(n) for n in DEVICE_IMAGE}
    into.mkdir(parents=True, exist_ok=True)
    level = [(_canon(r.split("[")[0]), set(r.split("[")[1].rstrip("]").split(",")) if "[" in r else set()) for r in REQUIREMENTS]
    done: dict[str, set[str]] = {}
    wheels: dict[str, Path] = {}
    while level:  # breadth first: one pip call per level of the dependency tree
        fresh: list[tuple[str, set[str]]] = []
        for name, extras in level:
            if name in have or (name in done and extras <= done[name]):
                continue
            if name not in pins:
                raise SystemExit(f"{name} is needed on the device but has no pin in {constraints}")
            done[name] = done.get(name, set()) | extras
            fresh.append((name, done[name]))
        new = {name: pins[name] for name, _ in fresh if name not in wheels}
        if "deepspeed" in new:
            wheels["deepspeed"] = _deepspeed(new.pop("deepspeed"), into)
        if new:
            wheels.update(_download(new, python, into))
        for name in new:
            print(f"  {wheels[name].name} ({wheels[name].stat().st_size / 2**20:.1f} MiB)", flush=True)
        level = [req for name, extras in fresh for req in _requires(wheels[name], extras, python)]
    return sorted(wheels.values(), key=lambda w: w.name)


def _tree_bytes() -> int:
    """What a call sends besides its carry: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    return sum((ROOT / os.fsdecode(p)).lstat().st_size for p in listed if p and (ROOT / os.fsdecode(p)).exists())


def prepare(args: argparse.Namespace) -> int:
    from contractrl.trainer import qwen_coder, smollm2

    out, cache = Path(args.out), Path(args.models)
    start = time.perf_counter()
    print(f"wheelhouse for CPython {args.python} on manylinux x86-64:", flush=True)
    wheels = wheelhouse(out / "build" / "wheelhouse", Path(args.constraints), args.python)
    files = [(w, f"wheelhouse/{w.name}", "base") for w in wheels]
    files.append((cache / "wheels" / smollm2.WHEEL, f"models/wheels/{smollm2.WHEEL}", "base"))
    if not args.no_qwen:
        for chunk in qwen_coder.QWEN_CODER_0_5B.gguf.chunks:
            files.append((cache / "wheels" / chunk.wheel.filename, f"models/wheels/{chunk.wheel.filename}", "qwen2.5-coder-0.5b"))
    absent = [str(f[0]) for f in files if not f[0].is_file()]
    if absent:
        raise SystemExit(f"missing here: {', '.join(absent)} (build the presets once: they fetch their wheels)")
    tree = _tree_bytes()
    part_bytes = min(MAX_PART, LIMIT - tree - (1 << 20)) if not args.part_mib else int(args.part_mib * 2**20)
    parts_dir = out / "parts"
    shutil.rmtree(parts_dir, ignore_errors=True)
    meta = {"python": args.python, "machine": "x86_64", "requirements": " ".join(REQUIREMENTS)}
    manifest = split(files, parts_dir, part_bytes, meta)
    for old in out.glob("c[0-9][0-9]"):
        shutil.rmtree(old)
    calls = plan_calls(manifest)
    for call in calls:  # hard links: the call folders cost no second copy
        folder = out / f"c{call.index:02d}"
        folder.mkdir()
        os.link(parts_dir / call.part, folder / call.part)
        shutil.copy(parts_dir / "manifest.json", folder / "manifest.json")
    ignored = (
        subprocess.run(["git", "check-ignore", "-q", str(out.resolve() / "c01")], cwd=ROOT, stderr=subprocess.DEVNULL).returncode
        == 0
    )
    sizes = {stage: sum(f.size for f in manifest.files if f.stage == stage) for stage in manifest.stages}
    print(f"\n{len(wheels)} wheels, {sizes['base'] / 2**20:.0f} MiB with smollm2", end="")
    if "qwen2.5-coder-0.5b" in sizes:
        print(f"; qwen2.5-coder-0.5b {sizes['qwen2.5-coder-0.5b'] / 2**20:.0f} MiB", end="")
    took = time.perf_counter() - start
    print(f"; {len(calls)} parts of at most {part_bytes / 2**20:.2f} MiB (working tree {tree / 2**20:.2f} MiB); {took:.0f} s")
    if not ignored:
        print(
            f"!! {out}/ is not ignored by git: `echo /{out.name}/ >> .git/info/exclude` before the calls"
            " (carry takes ignored paths)"
        )
    print(plan_text(calls, out.name))
    return 0


def plan_text(calls: list[Any], folder: str) -> str:
    """The device calls, as the tool takes them: one carried folder each, its part stashed in /tmp/gpu,
    and the training runs in the calls that complete a stage (back to back: a machine goes back 30 s
    after a call, and /tmp/gpu with it)."""
    lines = ["", "device calls (run them back to back; a machine is given back 30 s after a call):"]
    for call in calls:
        command = f"python3 benchmarks/gpu_learner.py stash {folder}/c{call.index:02d}"
        for stage in call.ready:
            model = "smollm2" if stage == "base" else stage
            command += f" && PYTHONUNBUFFERED=1 python3 benchmarks/gpu_learner.py run --model {model} --out $OUT"
        ready = f"  [completes {', '.join(call.ready)}]" if call.ready else ""
        carry = f'carry ["{folder}/c{call.index:02d}"] ({call.size / 2**20:.1f} MiB)'
        lines.append(f"  {call.index:2d}. {carry}{ready}\n      command: {command}")
    return "\n".join(lines)


# --- there ------------------------------------------------------------------------------------------


def stash(args: argparse.Namespace) -> int:
    """Copy a call's part out of the repository into ``--into`` and check it; say what is still missing."""
    folder, into = Path(args.folder), Path(args.into)
    manifest = read_manifest(folder / "manifest.json")
    into.mkdir(parents=True, exist_ok=True)
    shutil.copy(folder / "manifest.json", into / "manifest.json")
    by_name = {p.name: p for p in manifest.parts}
    for path in sorted(folder.glob("part[0-9][0-9][0-9]")):
        shutil.copy(path, into / path.name)
        check_part(into / path.name, by_name[path.name])
        print(f"stashed {path.name} ({path.stat().st_size / 2**20:.1f} MiB), sha256 checked", flush=True)
    for stage in manifest.stages:
        missing = missing_parts(manifest, into, [stage])
        print(f"  stage {stage}: " + (f"missing {', '.join(missing)}" if missing else "complete"))
    return 0


def _install(manifest: Any, files: Path, site: Path) -> None:
    """The wheelhouse into ``site`` (a target folder: the system site-packages stay as they are)."""
    stamp = site / ".carried"
    digest = ",".join(f.sha256 for f in manifest.stage_files("base"))
    if stamp.is_file() and stamp.read_text() == digest:
        return
    shutil.rmtree(site, ignore_errors=True)
    wheels = sorted(str(p) for p in (files / "wheelhouse").glob("*.whl"))
    command = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir"]
    subprocess.run([*command, "--target", str(site), *wheels], check=True)
    stamp.write_text(digest)


def _interpreter(work: Path, site: Path) -> Path:
    """A bare venv whose ``.pth`` puts ``site`` and this interpreter's own site-packages (torch) on the
    path: the trainer's schema-compile guard starts ``python -I`` children (no ``PYTHONPATH``), which
    must still import jsonschema_rs, and no file of the system site-packages is written."""
    import site as site_module

    venv = work / "venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    paths = [str(site), *site_module.getsitepackages()]
    (Path(purelib) / "carried.pth").write_text("\n".join(paths) + "\n")
    return python


def run(args: argparse.Namespace) -> int:
    import torch

    work = Path(args.work)
    manifest = read_manifest(work / "manifest.json")
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if here != manifest.meta.get("python"):
        raise SystemExit(
            f"this is Python {here}; the wheelhouse was built for {manifest.meta.get('python')}: prepare --python {here}"
        )
    if os.uname().machine != manifest.meta.get("machine", "x86_64"):
        raise SystemExit(f"this machine is {os.uname().machine}; the wheelhouse is for {manifest.meta.get('machine')}")
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    files = work / "files"
    join(manifest, work, files, STAGES[args.model])
    timings["join_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    site = work / "site"
    _install(manifest, files, site)
    python = _interpreter(work, site)
    timings["install_s"] = time.perf_counter() - t0
    cuda = torch.cuda.is_available()
    run_dir = work / "runs" / args.model
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = [
        f"model.name={args.model}",
        f"model.cache_dir={files / 'models'}",
        "stages=[sft]",
        f"sft.steps={args.steps}",
        f"sft.batch_size={args.batch_size}",
        f"sft.micro_batch_size={args.batch_size}",
        f"data.train_cases={args.cases}",
        "eval.enabled=false",
        "resources.ray=true",
        f"resources.learner_gpus={1 if cuda else 0}",
        f"resources.learner_cpus={args.learner_cpus}",
        "resources.num_workers=0",
        "deepspeed.enabled=true",
        "wandb.mode=offline",
        f"out={run_dir}",
        *args.override,
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / f"train_{args.model}.log"
    t0 = time.perf_counter()
    with log.open("w") as handle:
        done = subprocess.run(
            [str(python), "-m", "contractrl", "train", *overrides], env=env, stdout=handle, stderr=subprocess.STDOUT
        )
    timings["train_s"] = time.perf_counter() - t0
    print(log.read_text()[-3000:], flush=True)
    if done.returncode:
        raise SystemExit(f"contractrl train exited {done.returncode}: see {log}")
    sys.path.insert(0, str(site))
    import pyarrow.parquet as pq

    rows = pq.read_table(run_dir / "metrics.parquet").to_pylist()
    shutil.copy(run_dir / "metrics.parquet", out / f"metrics_{args.model}.parquet")
    steady = rows[1:] or rows  # the first step pays for warm-up (allocator, kernels)
    result = {
        "model": args.model,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "versions": {"python": sys.version.split()[0], "torch": torch.__version__, **_versions(site)},
        "overrides": overrides,
        **{k: round(v, 2) for k, v in timings.items()},
        "steps": len(rows),
        "step_s_median": _median([r["wall_s"] for r in steady]),
        "tokens_per_s_median": _median([r["tokens_per_s"] for r in steady]),
        "peak_gpu_gb": max((r.get("peak_gpu_gb") or 0.0 for r in rows), default=None) if cuda else None,
        "peak_rss_gb": max(r["peak_rss_gb"] for r in rows),
        "loss": [r["loss"] for r in rows],
    }
    (out / f"gpu_learner_{args.model}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "overrides"}), flush=True)
    return 0


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _versions(site: Path) -> dict[str, str]:
    found = {}
    for name in ("ray", "deepspeed", "transformers", "peft"):
        info = next(site.glob(f"{name}-*.dist-info"), None)
        found[name] = info.name.removesuffix(".dist-info").split("-")[1] if info else "system"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="here: wheelhouse, parts, manifest, call plan")
    p.add_argument("--out", default=".gpu")
    p.add_argument("--python", default=DEVICE_PYTHON, help="the device's Python, major.minor")
    p.add_argument("--constraints", default=str(ROOT / "constraints.txt"))
    p.add_argument("--models", default="runs/models", help="the model cache holding wheels/")
    p.add_argument("--no-qwen", action="store_true", help="smollm2 only (no second stage)")
    p.add_argument("--part-mib", type=float, default=0.0, help="part size (0: 60 MiB or what the working tree leaves)")
    s = sub.add_parser("stash", help="there: copy a carried part to --into and check it")
    s.add_argument("folder")
    s.add_argument("--into", default=str(WORK))
    r = sub.add_parser("run", help="there: rebuild, check, install, train, measure")
    r.add_argument("--model", choices=sorted(STAGES), default="smollm2")
    r.add_argument("--work", default=str(WORK))
    r.add_argument("--out", required=True)
    r.add_argument("--steps", type=int, default=8)
    r.add_argument("--batch-size", type=int, default=4)
    r.add_argument("--cases", type=int, default=64, help="data.train_cases")
    r.add_argument("--learner-cpus", type=float, default=1.0)
    r.add_argument("--override", nargs="*", default=[], help="more contractrl train overrides")
    args = parser.parse_args(argv)
    try:
        return {"prepare": prepare, "stash": stash, "run": run}[args.command](args)
    except CarryError as exc:
        raise SystemExit(f"gpu_learner: {exc}") from None


if __name__ == "__main__":
    sys.exit(main())
