"""Inspect AI logs written here, offline, with Inspect's ``mockllm`` provider (needs ``inspect-ai``).

``write_panel_logs`` writes the eval the Inspect tests read: two systems (``mockllm/sys-a`` and
``mockllm/sys-b``) x 20 arithmetic samples x 3 epochs, each answer graded by a three-grader panel
(``model_graded_qa`` with ``mockllm/grader-a``, ``-b``, ``-c``) collected by ``multi_scorer(...,
reducer="collect")``. Every reply is a deterministic function of its prompt and how often that prompt was seen,
so two runs write the same scores. ``silent_every`` makes grader-c reply without a grade to every k-th prompt
(Inspect then drops its vote before collecting, so the list is shorter). ``write_variant_logs`` writes one
system x 6 samples x 2 epochs over two prompt variants (task metadata) and two temperatures, scored by
``match()``, as ``.json`` logs.

Run as a script to regenerate the bundled copies: ``python tests/inspect_logs.py DIR``.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections import Counter
from pathlib import Path

SYSTEMS = {"sys-a": 0.75, "sys-b": 0.45}  # how often each system answers right
GRADERS = {"grader-a": 0.05, "grader-b": 0.15, "grader-c": 0.30}  # how often each grader flips the right grade
N_SAMPLES, EPOCHS = 20, 3


def _offline_tokens() -> None:
    """tiktoken downloads its encoding on first use; this machine has no network, so count length / 4 (older
    inspect-ai versions do not use tiktoken at all)."""
    try:
        import tiktoken
    except ImportError:
        return

    class _Encoding:
        def encode(self, text, **_):
            return range(max(1, len(text) // 4))

    tiktoken.get_encoding = lambda name: _Encoding()


def _draw(*key) -> float:
    """A uniform number from the key alone (replies must not depend on the order calls run in)."""
    return int(hashlib.sha256("|".join(map(str, key)).encode()).hexdigest()[:12], 16) / 16**12


def _system(name: str):
    from inspect_ai.model import ModelOutput, get_model

    seen: Counter = Counter()

    def reply(messages, tools, tool_choice, config):
        question = messages[-1].text
        seen[question] += 1
        a, b = map(int, re.findall(r"\d+", question)[:2])
        right = _draw(name, question, seen[question]) < SYSTEMS[name]
        return ModelOutput.from_content(model=name, content=str(a + b if right else a + b + 1))

    return get_model(f"mockllm/{name}", custom_outputs=reply)


def _grader(name: str, silent_every: int | None):
    from inspect_ai.model import ModelOutput, get_model

    seen: Counter = Counter()

    def reply(messages, tools, tool_choice, config):
        prompt = messages[-1].text
        seen[prompt] += 1
        task = re.search(r"\[Task\]: What is (\d+) \+ (\d+)\?", prompt)
        answer = re.search(r"\[Submission\]: (-?\d+)", prompt)
        right = bool(task and answer and int(answer.group(1)) == int(task.group(1)) + int(task.group(2)))
        draw = _draw(name, prompt, seen[prompt])
        if silent_every and name == "grader-c" and int(draw * 1000) % silent_every == 0:
            return ModelOutput.from_content(model=name, content="I cannot tell from this.")
        flip = draw < GRADERS[name]
        return ModelOutput.from_content(model=name, content=f"GRADE: {'C' if right != flip else 'I'}")

    return get_model(f"mockllm/{name}", custom_outputs=reply)


def _samples(n: int):
    from inspect_ai.dataset import Sample

    return [Sample(input=f"What is {3 * i + 1} + {i + 2}?", target=str(4 * i + 3), id=f"q{i:02d}")
            for i in range(n)]


def _panel_task(silent_every: int | None, metrics: list | None, reducer: str = "collect"):
    from inspect_ai import Task
    from inspect_ai.scorer import model_graded_qa, multi_scorer
    from inspect_ai.solver import generate

    graders = [model_graded_qa(model=_grader(g, silent_every)) for g in GRADERS]
    panel = multi_scorer(graders, reducer=reducer)
    if reducer != "collect":  # inspect-ai 0.3.133 records only scorers made by @scorer: wrap the panel in one
        from inspect_ai.scorer import accuracy, scorer

        @scorer(metrics=[accuracy()])
        def grader_panel():
            return multi_scorer(graders, reducer=reducer)

        panel = grader_panel()
    return Task(dataset=_samples(N_SAMPLES), solver=generate(), scorer=panel, epochs=EPOCHS, name="sums",
                metrics=metrics)


def write_panel_logs(log_dir: str | Path, *, silent_every: int | None = None, log_format: str = "eval",
                     metrics: list | None = None, reducer: str = "collect") -> list[Path]:
    """The panel eval (module docstring); the paths of its two logs (one per system). ``metrics`` replaces the
    panel's own (e.g. ``[tee_interval()]``); ``reducer`` is the panel's (inspect-ai before 0.3.2xx has no
    "collect": there a panel is reduced, e.g. "mode", and only the graders' replies keep their votes)."""
    _offline_tokens()
    from inspect_ai import eval as inspect_eval

    logs = inspect_eval(_panel_task(silent_every, metrics, reducer), model=[_system(s) for s in SYSTEMS],
                        log_dir=str(log_dir), display="none", log_format=log_format)
    return [Path(log.location) for log in logs]


def run_panel_eval_set(log_dir: str | Path, metrics: list | None = None) -> bool:
    """The panel eval as an eval set (``inspect_ai.eval_set``), so eval-set hooks run when it ends."""
    _offline_tokens()
    from inspect_ai import eval_set

    done, _ = eval_set(_panel_task(None, metrics), model=[_system(s) for s in SYSTEMS], log_dir=str(log_dir),
                       display="none")
    return done


def write_variant_logs(log_dir: str | Path) -> list[Path]:
    """One system over two prompt variants (task metadata ``prompt_variant``) x two temperatures, ``.json``."""
    _offline_tokens()
    from inspect_ai import Task
    from inspect_ai import eval as inspect_eval
    from inspect_ai.model import GenerateConfig
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate, prompt_template

    paths = []
    for variant, template in {"plain": "{prompt}", "terse": "Answer with a number only. {prompt}"}.items():
        for temperature in (0.0, 0.7):
            task = Task(dataset=_samples(6), solver=[prompt_template(template), generate()], scorer=match(),
                        epochs=2, name="sums", metadata={"prompt_variant": variant},
                        config=GenerateConfig(temperature=temperature))
            logs = inspect_eval(task, model=_system("sys-a"), log_dir=str(log_dir), display="none",
                                log_format="json")
            paths += [Path(log.location) for log in logs]
    return paths


if __name__ == "__main__":
    out = Path(sys.argv[1])
    import inspect_ai

    if inspect_ai.__version__ == "0.3.133":  # the oldest version read: no "collect" reducer yet
        paths = write_panel_logs(out / "panel-mode", reducer="mode") + write_panel_logs(out / "panel-mode-json",
                                                                                        reducer="mode",
                                                                                        log_format="json")
    else:
        paths = write_panel_logs(out / "panel") + write_panel_logs(out / "silent", silent_every=7) \
            + write_variant_logs(out / "variants")
    for p in paths:
        print(p)
