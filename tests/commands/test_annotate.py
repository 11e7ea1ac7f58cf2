"""``nsysan profile --annotate`` (issue 53): NVTX ranges around a framework's step, added through
nsysan's ``sitecustomize`` without touching the program.

The frameworks are fakes (tiny ``torch``, ``lightning``, ``transformers`` and ``jax`` packages on a
temporary PYTHONPATH, shaped as the real ones where the wrappers attach), and so is NVTX: a fake
``nvtx`` package records every range and mark, in order, with the fake frameworks' own calls between
them. Each program runs in a fresh interpreter, as the profiled command would.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from nsysan.analyses import recorder_ranges
from nsysan.record import annotate

SITE = annotate.SITE_DIR

FAKES = {
    "fakelog.py": """
        import atexit, json, os
        EVENTS = []
        def log(*event):
            EVENTS.append(list(event))
        @atexit.register
        def _dump():
            with open(os.environ["FAKE_NVTX_LOG"], "w") as f:
                json.dump(EVENTS, f)
        """,
    "nvtx/__init__.py": """
        from fakelog import log
        class Domain:
            def __init__(self, name):
                self.name, self.n = name, 0
            def get_event_attributes(self, message=None):
                return message
            def push_range(self, a):
                log("push", self.name, a)
            def pop_range(self):
                log("pop", self.name)
            def start_range(self, a):
                self.n += 1
                log("start", self.name, a, self.n)
                return self.n
            def end_range(self, rid):
                log("end", self.name, rid)
            def mark(self, a):
                log("mark", self.name, a)
        _domains = {}
        def get_domain(name=None):
            return _domains.setdefault(name, Domain(name))
        """,
    "torch/__init__.py": """
        from torch import _tensor, autograd, cuda, compiler
        from torch._tensor import Tensor
        from torch import nn, optim
        import torch.utils.data
        """,
    "torch/_tensor.py": """
        from fakelog import log
        class TensorBase:
            def __init__(self, v=0.0):
                self.v = v
            def item(self):
                log("call", "item")
                return self.v
        class Tensor(TensorBase):
            def backward(self):
                import torch.autograd
                torch.autograd.backward(self)
        """,
    "torch/autograd/__init__.py": """
        from fakelog import log
        def backward(t):
            log("call", "autograd.backward")
        """,
    "torch/cuda/__init__.py": """
        from fakelog import log
        def synchronize():
            log("call", "synchronize")
        """,
    "torch/compiler/__init__.py": "def is_compiling():\n    return False\n",
    "torch/nn/__init__.py": "from torch.nn.modules.module import Module\nfrom torch.nn import modules\n",
    "torch/nn/modules/__init__.py": "from torch.nn.modules.module import Module\n",
    "torch/nn/modules/module.py": """
        from fakelog import log
        class Module:
            def __init__(self, params=(), children=()):
                self._params, self._children = list(params), list(children)
            def parameters(self):
                yield from self._params
                for c in self._children:
                    yield from c.parameters()
            def _call_impl(self, *args, **kwargs):
                return self.forward(*args, **kwargs)
            __call__ = _call_impl
        """,
    "torch/optim/__init__.py": "from torch.optim.optimizer import Optimizer\n",
    "torch/optim/optimizer.py": """
        import functools
        from fakelog import log
        _pre, _post = [], []
        def register_optimizer_step_pre_hook(h):
            _pre.append(h)
        def register_optimizer_step_post_hook(h):
            _post.append(h)
        class Optimizer:
            def __init_subclass__(cls, **kw):  # torch wraps each subclass' step with the global hooks
                step = cls.step
                @functools.wraps(step)
                def wrapped(self, *a, **k):
                    for h in _pre:
                        h(self, a, k)
                    out = step(self, *a, **k)
                    for h in _post:
                        h(self, a, k)
                    return out
                cls.step = wrapped
            def zero_grad(self):
                log("call", "zero_grad")
        """,
    "torch/utils/__init__.py": "",
    "torch/utils/data/__init__.py": "from torch.utils.data.dataloader import DataLoader\n",
    "torch/utils/data/dataloader.py": """
        from fakelog import log
        class DataLoader:
            def __init__(self, n):
                self.n = n
            def __iter__(self):
                return _SingleProcessDataLoaderIter(self.n)
        class _BaseDataLoaderIter:
            def __init__(self, n):
                self.i, self.n = 0, n
            def __iter__(self):
                return self
            def __next__(self):
                return self._next_data()
        class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
            def _next_data(self):
                if self.i >= self.n:
                    raise StopIteration
                self.i += 1
                log("call", "next_data")
                return self.i
        """,
    "train_plain.py": """
        import torch
        from fakelog import log
        class Net(torch.nn.Module):
            def __init__(self):
                self.inner = torch.nn.Module(params=[1])
                super().__init__(children=[self.inner])
                self.inner.forward = lambda x: log("call", "inner")
            def forward(self, x):
                log("call", "forward")
                self.inner(x)
                return torch.Tensor(1.0)
        class Loss(torch.nn.Module):
            def forward(self, y):
                return y
        class SGD(torch.optim.Optimizer):
            def step(self):
                log("call", "step")
        model, loss_fn, opt = Net(), Loss(), SGD()
        for batch in torch.utils.data.DataLoader(2):
            opt.zero_grad()
            loss = loss_fn(model(batch))
            loss.backward()
            opt.step()
            loss.item()
        torch.cuda.synchronize()
        """,
    "lightning/__init__.py": "",
    "lightning/pytorch/__init__.py": "from lightning.pytorch.strategies.strategy import Strategy\n",
    "lightning/pytorch/strategies/__init__.py": "",
    "lightning/pytorch/strategies/strategy.py": """
        class Strategy:
            def __init__(self, module):
                self.lightning_module = module
            def training_step(self, *args):
                return self.lightning_module.training_step(*args)
            def validation_step(self, *args):
                return self.lightning_module.validation_step(*args)
        """,
    "train_lightning.py": """
        import torch
        from lightning.pytorch import Strategy
        from fakelog import log
        class Lit(torch.nn.Module):
            def training_step(self, b):
                log("call", "training_step")
                return self(b)
            def validation_step(self, b):
                log("call", "validation_step")
            def forward(self, b):
                return torch.Tensor(0.5)
        class Adam(torch.optim.Optimizer):
            def step(self, closure):  # Lightning runs training_step and backward in the closure
                closure()
                log("call", "step")
        lit = Lit(params=[1])
        s, opt = Strategy(lit), Adam()
        for batch in torch.utils.data.DataLoader(2):
            opt.step(lambda: s.training_step(batch).backward())
        s.validation_step(0)
        """,
    "transformers/__init__.py": "",
    "transformers/trainer.py": """
        class Trainer:
            def __init__(self, model, opt):
                self.model, self.opt = model, opt
            def training_step(self, model, inputs):
                loss = model(inputs)
                loss.backward()
                return loss
            def evaluate(self):
                return self.model(0)
            def train(self, loader):
                for b in loader:
                    self.training_step(self.model, b)
                    self.opt.step()
                    self.opt.zero_grad()
                return self.evaluate()
        """,
    "transformers/generation/__init__.py": "",
    "transformers/generation/utils.py": """
        class GenerationMixin:
            def generate(self, x, n=3):
                for _ in range(n):
                    x = self(x)
                return x
        """,
    "train_hf.py": """
        import torch
        from transformers.trainer import Trainer
        class M(torch.nn.Module):
            def forward(self, b):
                return torch.Tensor(0.1)
        class AdamW(torch.optim.Optimizer):
            def step(self):
                pass
        Trainer(M(params=[1]), AdamW()).train(torch.utils.data.DataLoader(2))
        """,
    "generate_hf.py": """
        import torch
        from transformers.generation.utils import GenerationMixin
        class LM(torch.nn.Module, GenerationMixin):
            def forward(self, x):
                return x + 1
        lm = LM(params=[1])
        for _ in range(2):
            lm.generate(0, n=3)
        """,
    "jax/__init__.py": """
        from fakelog import log
        class _Pjit:
            def __init__(self, f):
                self.f, self.__name__ = f, f.__name__
            def __call__(self, *a):
                log("call", "jitted " + self.f.__name__)
                return self.f(*a)
            def lower(self, *a):
                return "lowered " + self.f.__name__
        def jit(fun=None, **kw):
            if fun is None:
                return lambda f: _Pjit(f)
            return _Pjit(fun)
        """,
    "train_jax.py": """
        import functools
        import jax
        @jax.jit
        def train_step(x):
            return x + 1
        @functools.partial(jax.jit, static_argnums=0)
        def loss_fn(x):
            return x
        later = jax.jit(static_argnums=0)(lambda x: x)
        for i in range(2):
            train_step(i)
        loss_fn(1)
        print(train_step.lower(1), train_step.__name__)
        """,
    "no_framework.py": """
        import json, sys
        print(json.dumps({"nvtx": "nvtx" in sys.modules, "hooks": [type(f).__name__ for f in sys.meta_path]}))
        """,
}


@pytest.fixture(scope="module")
def fakes(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fakes")
    for rel, text in FAKES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


def run_program(fakes: Path, script: str, tmp_path: Path, *, pythonpath: str | None = None,
                extra_env: dict[str, str] | None = None) -> tuple[list[list], str]:
    """``script`` run with nsysan's site folder first on PYTHONPATH (as ``nsysan profile --annotate``
    sets it), the fakes after it; returns the recorded events and stdout."""
    log = tmp_path / "events.json"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NSYSAN"))}
    env = annotate.annotate_env({**base, "PYTHONPATH": pythonpath or str(fakes), "FAKE_NVTX_LOG": str(log),
                                 "NSYSAN_ANNOTATE_NVTX": "package", **(extra_env or {})})
    out = subprocess.run([sys.executable, str(fakes / script)], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path, check=False)
    assert out.returncode == 0, out.stderr
    assert "nsysan" not in out.stderr, out.stderr
    return (json.loads(log.read_text()) if log.exists() else []), out.stdout


def nested(events: list[list]) -> list[str]:
    """The events as an indented outline: ranges open and close, calls and marks inside them."""
    lines, depth, open_steps = [], 0, {}
    assert events[:1] == [] or events[0] == ["mark", "nsysan", "nsysan profile --annotate: sitecustomize, NVTX through package"]
    for ev in events[1:]:
        kind = ev[0]
        if kind == "push":
            assert ev[1] == recorder_ranges.RECORDER_DOMAIN
            lines.append("  " * depth + ev[2])
            depth += 1
        elif kind == "pop":
            depth -= 1
        elif kind == "start":
            open_steps[ev[3]] = ev[2]
            lines.append("  " * depth + f"<{ev[2]} {ev[3]}>")
        elif kind == "end":
            lines.append("  " * depth + f"</{open_steps.pop(ev[2])} {ev[2]}>")
        elif kind == "mark":
            prefix, site = ev[2].split(" ", 1)
            lines.append("  " * depth + f"mark {prefix} {Path(site).name}")
        else:
            lines.append("  " * depth + "." + ev[1])
    assert depth == 0
    return lines


def test_plain_loop_ranges_nest_in_order(fakes, tmp_path):
    # GIVEN a plain PyTorch loop; WHEN it runs annotated
    events, _ = run_program(fakes, "train_plain.py", tmp_path)
    # THEN one step per optimizer step, the first from the first batch; forward only for the outer
    # model (not its child, not the parameter-free loss); marks name the caller's line
    assert nested(events) == [
        "<step 1>", "input wait", "  .next_data", "zero_grad", "  .zero_grad", "forward", "  .forward", "  .inner",
        "backward", "  .autograd.backward", "optimizer", "  .step", "</step 1>", "<step 2>",
        "mark item train_plain.py:25", ".item",
        "input wait", "  .next_data", "zero_grad", "  .zero_grad", "forward", "  .forward", "  .inner",
        "backward", "  .autograd.backward", "optimizer", "  .step", "</step 2>", "<step 3>",
        "mark item train_plain.py:25", ".item",
        "input wait",  # StopIteration: the range still closes
        "mark synchronize train_plain.py:26", ".synchronize"]


def test_lightning_hooks_inside_the_optimizer_step(fakes, tmp_path):
    events, _ = run_program(fakes, "train_lightning.py", tmp_path)
    lines = nested(events)
    assert lines[:12] == ["<step 1>", "input wait", "  .next_data", "optimizer", "  training_step",
                          "    .training_step", "    forward", "  backward", "    .autograd.backward", "  .step",
                          "</step 1>", "<step 2>"]
    assert lines[-3:] == ["input wait", "validation_step", "  .validation_step"]


def test_hf_trainer_and_generate(fakes, tmp_path):
    events, _ = run_program(fakes, "train_hf.py", tmp_path)
    lines = nested(events)
    assert lines[:8] == ["<step 1>", "input wait", "  .next_data", "training_step", "  forward", "  backward",
                         "    .autograd.backward", "optimizer"]
    assert lines[-2:] == ["evaluate", "  forward"]
    events, _ = run_program(fakes, "generate_hf.py", tmp_path)
    # no optimizer: each top-level generate() is a step, each model forward inside it a token
    assert nested(events) == ["<step 1>", "token", "token", "token", "</step 1>",
                              "<step 2>", "token", "token", "token", "</step 2>"]


def test_jax_jitted_calls_are_ranges_named_by_the_function(fakes, tmp_path):
    events, out = run_program(fakes, "train_jax.py", tmp_path)
    assert nested(events) == ["train_step", "  .jitted train_step", "train_step", "  .jitted train_step",
                              "loss_fn", "  .jitted loss_fn"]
    assert out.split() == ["lowered", "train_step", "train_step"]  # the rest of the jitted object still works


def test_nothing_is_installed_without_a_framework(fakes, tmp_path):
    events, out = run_program(fakes, "no_framework.py", tmp_path)
    assert events == []
    seen = json.loads(out)
    assert seen["nvtx"] is False  # NVTX is not even loaded
    assert seen["hooks"][0] == "_Finder"


def test_users_pythonpath_and_sitecustomize_still_work(fakes, tmp_path):
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    (user / "mymod.py").write_text("VALUE = 42\n")
    script = tmp_path / "prog.py"
    script.write_text("import os, sys, json, mymod, torch, sitecustomize\n"
                      "print(json.dumps([os.environ.get('USER_SITE_RAN'), mymod.VALUE, sitecustomize.__file__,"
                      " torch.nn.Module.__call__.__name__]))\n")
    (fakes / "prog_user.py").write_text(script.read_text())
    _, out = run_program(fakes, "prog_user.py", tmp_path, pythonpath=os.pathsep.join([str(user), str(fakes)]))
    ran, value, site_file, call = json.loads(out)
    assert (ran, value, call) == ("1", 42, "__call__")
    assert Path(site_file) == user / "sitecustomize.py"


def test_ctypes_backend_without_the_nvtx_package(fakes, tmp_path):
    lib = next((p for p in ("/usr/local/cuda/lib64/libnvToolsExt.so.1", *map(str, Path("/usr/local").glob(
        "cuda*/lib*/libnvtx3interop.so.1"))) if Path(p).exists()), None)
    if lib is None:
        pytest.skip("no libnvToolsExt / libnvtx3interop here")
    # the real library without a tool attached: the calls are no-ops, the program runs as before
    _, out = run_program(fakes, "train_jax.py", tmp_path,
                         extra_env={"NSYSAN_ANNOTATE_NVTX": "ctypes", "NSYSAN_NVTX_LIBRARY": lib})
    assert out.split() == ["lowered", "train_step", "train_step"]


def test_the_names_match_the_analyzers():
    sys.path.insert(0, str(SITE))
    try:
        import _nsysan_annotate as w
    finally:
        sys.path.remove(str(SITE))
    assert w.DOMAIN == recorder_ranges.RECORDER_DOMAIN
    assert {w.STEP, w.INPUT_WAIT, w.FORWARD, w.BACKWARD, w.OPTIMIZER, w.ZERO_GRAD, w.TRAINING_STEP,
            w.VALIDATION_STEP, w.EVALUATE, w.GENERATE, w.TOKEN} == set(recorder_ranges.RANGES)
    assert (w.SYNC_MARK, w.ITEM_MARK) == recorder_ranges.MARKS
    assert recorder_ranges.added_by_recorder("nsysan") and not recorder_ranges.added_by_recorder("NCCL")


# --- nsysan profile --annotate: the command line and the environment nsys gets --------------------

RUNNING_NSYS = r'''#!{python}
"""A stand-in for nsys that runs the profiled command: logs argv and PYTHONPATH, runs the command
(what follows `-f true|false`) in nsys' environment, then writes the outputs."""
import json, os, shutil, subprocess, sys
argv = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"argv": argv, "pythonpath": os.environ.get("PYTHONPATH")}}) + "\n")
if argv == ["--version"]:
    print("NVIDIA Nsight Systems version 2025.3.1.90-253135822126v0")
elif argv[:1] == ["profile"]:
    out = argv[argv.index("-o") + 1]
    command = [a for a in argv[argv.index("-f") + 2:] if not a.startswith("--cuda-graph-trace")]
    rc = subprocess.call(command)
    open(out + ".nsys-rep", "wb").write(b"NVIDIA Tegra Profiler Report 1.\n")
    shutil.copyfile(os.environ["FAKE_SQLITE"], out + ".sqlite")
    sys.exit(rc)
elif argv[:2] == ["export", "--help"]:
    print("usage: nsys export\n  --include-blobs=")
elif argv[:1] == ["export"]:
    shutil.copyfile(os.environ["FAKE_SQLITE"], argv[argv.index("--output") + 1])
'''


@pytest.fixture
def nsys_env(tmp_path, fakes):
    from test_inputs_profile import fake_nsys

    sqlite = next((FIXTURES / "launch_eager").glob("trace.sqlite*"))
    plain = tmp_path / "t.sqlite"
    if sqlite.suffix == ".xz":
        import lzma

        plain.write_bytes(lzma.decompress(sqlite.read_bytes()))
    else:
        shutil.copyfile(sqlite, plain)
    fake, path = fake_nsys(tmp_path, RUNNING_NSYS)
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NSYSAN_", "FAKE_", "PYTHON"))}
    e.update(PATH=path, NSYSAN_NSYS=str(fake), XDG_CACHE_HOME=str(tmp_path / "cache"),
             FAKE_LOG=str(tmp_path / "nsys.log"), FAKE_SQLITE=str(plain), FAKE_NVTX_LOG=str(tmp_path / "events.json"),
             NSYSAN_ANNOTATE_NVTX="package")
    return e


def profile(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], list[dict]]:
    # nsysan itself is found through its sys.path; the profiled command sees only the environment
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from nsysan.cli import main; sys.exit(main())"
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60, env=env,
                       cwd=cwd, check=False)
    log = Path(env["FAKE_LOG"])
    return r, [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def test_profile_annotate_prepends_the_site_folder_and_runs_the_program_annotated(nsys_env, fakes, tmp_path):
    # GIVEN a user PYTHONPATH (the fakes); WHEN nsysan profile --annotate runs a Python program
    nsys_env["PYTHONPATH"] = str(fakes)
    r, log = profile(["profile", "--annotate", "-o", "t1", "--", sys.executable, str(fakes / "train_plain.py")],
                     nsys_env, tmp_path)
    assert r.returncode == 0, r.stderr
    # THEN nsys' command line is the plain one, and its environment has the site folder first
    prof = [c for c in log if c["argv"][:1] == ["profile"]]
    assert prof[0]["argv"] == ["profile", "-t", "cuda,nvtx,osrt", "-s", "none", "--export", "sqlite", "-o", "t1",
                               "-f", "false", sys.executable, str(fakes / "train_plain.py")]
    assert prof[0]["pythonpath"] == os.pathsep.join([str(SITE), str(fakes)])
    # the program ran annotated; nsys' other steps (--version) and nsysan's own environment are untouched
    assert nested(json.loads(Path(nsys_env["FAKE_NVTX_LOG"]).read_text()))[:2] == ["<step 1>", "input wait"]
    assert [c["pythonpath"] for c in log if c["argv"] == ["--version"]] == [str(fakes)]
    assert "annotating" in r.stderr


@pytest.mark.parametrize("argv, on", [(["--diagnose"], True), ([], False), (["--diagnose", "--no-annotate"], False)])
def test_annotate_default_follows_diagnose(nsys_env, fakes, tmp_path, argv, on):
    r, log = profile(["profile", *argv, "--gpu-metrics-devices", "none", "-o", "t2", "--", "python3", "-c", "pass"],
                     nsys_env, tmp_path)
    assert r.returncode == 0, r.stderr
    prof = [c for c in log if c["argv"][:1] == ["profile"]]
    assert prof[0]["pythonpath"] == (str(SITE) if on else None)


@pytest.mark.parametrize("command, why", [
    (["python3", "-I", "train.py"], "`python3 -I` isolated mode ignores PYTHONPATH"),
    (["python3", "-W", "ignore", "-E", "train.py"], "`python3 -E` ignores PYTHONPATH"),
    (["python3", "-uS", "train.py"], "`python3 -S` skips the site module"),
    (["env", "-i", "python3", "train.py"], "`env -i` clears the environment"),
])
def test_annotate_refuses_where_it_cannot_inject(nsys_env, tmp_path, command, why):
    r, log = profile(["profile", "--annotate", "-o", "t3", "--", *command], nsys_env, tmp_path)
    assert r.returncode == 2
    assert why in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    assert log == []  # refused before nsys ran
    # implied by --diagnose: a note, and the program runs unannotated
    r, log = profile(["profile", "--diagnose", "--gpu-metrics-devices", "none", "-o", "t3", "--", *command],
                     nsys_env, tmp_path)
    assert "not annotated" in r.stderr
    assert [c["pythonpath"] for c in log if c["argv"][:1] == ["profile"]] == [None]


def test_python_options_are_read_before_the_program():
    assert annotate.blocked(["python3", "-c", "import x", "-I"]) is None  # the program's own argument
    assert annotate.blocked(["python3", "train.py", "-S"]) is None
    assert annotate.blocked(["python3", "-Xdev", "-m", "torch.distributed.run", "-E"]) is None
    assert annotate.blocked(["torchrun", "--nproc-per-node", "2", "train.py"]) is None
    assert annotate.blocked(["env", "A=1", "python3", "-I", "x.py"]).startswith("`python3 -I`")


def test_a_command_that_is_not_python_runs_with_a_note(nsys_env, fakes, tmp_path):
    nsys_env["PYTHONPATH"] = str(fakes)
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} {fakes / 'train_jax.py'}\n")
    script.chmod(0o755)
    r, _ = profile(["profile", "--annotate", "-o", "t4", "--", str(script)], nsys_env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "run.sh is not a Python program nsysan knows" in r.stderr
    assert nested(json.loads(Path(nsys_env["FAKE_NVTX_LOG"]).read_text()))[0] == "train_step"


# --- the recordings (issue 53): the recorder's step period equals the framework's own ----------------

# fixture: (the recorder's iteration range, the framework's own step boundary: kernels whose name
# (demangled LIKE, or short name equal) is the optimizer update, launched once or in one burst a step)
RECORDED = {
    "annotate_plain": ("step", "%FusedOptimizerTensorListMetadata%"),
    "annotate_lightning": ("step", "%FusedOptimizerTensorListMetadata%"),
    "annotate_hf": ("step", "%FusedOptimizerTensorListMetadata%"),
    "annotate_jax": ("train_step", "loop_add_fusion"),  # the last fusion of the jitted step (optax's update)
}
BURST_GAP_NS = 1_000_000  # optimizer kernels closer than this are one step's (HF: 3 a step, us apart)


def recorder_ends(conn, text: str) -> list[int]:
    """End times of the closed ranges ``text`` in the recorder's domain, in order."""
    return [r[0] for r in conn.execute(
        """SELECT e."end" FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
           WHERE e.domainId = (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = ?)
             AND e.eventType IN (59, 60) AND COALESCE(e.text, s.value) = ? AND e."end" IS NOT NULL
           ORDER BY e."end" """, (recorder_ranges.RECORDER_DOMAIN, text))]


def boundary_ends(conn, kernel: str) -> list[int]:
    """End of each step's optimizer update: the kernels ``kernel``, bursts less than BURST_GAP_NS apart joined."""
    out: list[list[int]] = []
    for start, end in conn.execute(
            """SELECT k.start, k."end" FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds d ON d.id = k.demangledName
               JOIN StringIds s ON s.id = k.shortName WHERE d.value LIKE ? OR s.value = ? ORDER BY k.start""",
            (kernel, kernel)):
        if out and start - out[-1][1] < BURST_GAP_NS:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [e for _, e in out]


def median_period(ends: list[int]) -> float:
    import statistics

    return statistics.median(b - a for a, b in itertools.pairwise(ends))


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_step_period_equals_the_frameworks(name):
    from sqltruth import open_fixture

    if not (FIXTURES / name / "trace.sqlite.xz").exists():
        pytest.skip(f"{name}: not recorded")
    text, kernel = RECORDED[name]
    conn = open_fixture(name)
    try:
        steps, truth = recorder_ends(conn, text), boundary_ends(conn, kernel)
    finally:
        conn.close()
    assert len(truth) >= 40 and abs(len(steps) - len(truth)) <= 1, (len(steps), len(truth))
    ours, theirs = median_period(steps), median_period(truth)
    assert abs(ours - theirs) <= 0.05 * theirs, (ours, theirs)


def test_iteration_steps_leave_out_the_step_nsys_closed_at_the_end():
    import pandas as pd

    # GIVEN two steps each ending with an optimizer step, a third opened by the last one and closed
    # at the capture's end, and a step in another process that never ran an optimizer (inference)
    rows = [("nsysan", "step", 0, 100, 1), ("nsysan", "optimizer", 80, 100, 1), ("nsysan", "step", 100, 200, 1),
            ("nsysan", "optimizer", 180, 200, 1), ("nsysan", "step", 200, 5_000, 1), ("nsysan", "forward", 210, 220, 1),
            ("nsysan", "step", 0, 50, 2), ("app", "step", 0, 100, 1), ("nsysan", "step", 300, None, 2)]
    nvtx = pd.DataFrame(rows, columns=["domain", "text", "start_ns", "end_ns", "pid"]).assign(
        tid=lambda d: d["pid"], end_ns=lambda d: d["end_ns"].astype("Int64"))
    # WHEN / THEN
    got = recorder_ranges.iteration_steps(nvtx)
    assert list(zip(got["pid"], got["start_ns"])) == [(1, 0), (1, 100), (2, 0)]


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_the_recorded_steps_that_are_iterations(name):
    import nsysan

    path = FIXTURES / name / "trace.sqlite.xz"
    if not path.exists():
        pytest.skip(f"{name}: not recorded")
    from sqltruth import open_fixture

    text, kernel = RECORDED[name]
    conn = open_fixture(name)
    try:
        truth = boundary_ends(conn, kernel)
        db = conn.execute("PRAGMA database_list").fetchone()[2]
    finally:
        conn.close()
    steps = recorder_ranges.iteration_steps(nsysan.open_trace(db).nvtx)
    # one per optimizer step (the trailing one left out); JAX has no step, its ranges are the jitted calls
    assert len(steps) == (len(truth) if text == "step" else 0)
