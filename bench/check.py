"""The regression guard on whole commands: every runnable command of the README and the guides, and the real
files users bring, each run as its own process; its CPU (user + system, of the child, from the OS), its peak
memory (the child's maximum resident set) and a digest of the numbers it writes, against the last release.

The release is the commit ``bench/baseline.json`` was recorded with. Its package source is taken from git
(``git archive``) and every case is run with it too, in the same session, on the same files and Python, the
two alternating: a case fails when it takes more than 25% more CPU (and 0.5 s more: start-up noise) or 25% more
peak memory (and 20 MiB more) than the release's code did just before, or when its numbers differ from the
release's and ``CHANGELOG.md``'s "Unreleased" section does not name the case (in backticks). A machine that is
slower, loaded, or rounds the last digits otherwise moves both alike. Where git or that commit is not at hand
(a source archive, a shallow clone), the figures stored in ``bench/baseline.json`` stand in, and it says so.

The digest is of the JSON the command writes (``--json -``, or the files it writes with ``-o``/``--out``), with
the values that differ run to run left out (timings, dates, versions, paths) and every number rounded to 5
significant digits (within 1e-12 of 0: 0); a command that writes neither (an HTML report) has no digest.
Commands under 20 s of CPU run three times, longer ones twice, each way; the fastest run counts (on one machine,
the same command's CPU varied by up to 20% between runs minutes apart).

Run: ``make bench-check`` (compare), ``make bench-record`` (store today's figures for a release), or
``python bench/check.py [--only ID,...] [--table PATH] [--stored]`` (``--stored``: against the stored figures,
without running the release's code). Real files come from ``../shared/data`` when present; their cases are
skipped, and said, without it.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from release import environment, source_of

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
BASELINE = ROOT / "bench" / "baseline.json"
CHANGELOG = ROOT / "CHANGELOG.md"
CPU_SLACK, CPU_FLOOR = 1.25, 0.5  # a slowdown past 25% and 0.5 s fails
MEM_SLACK, MEM_FLOOR = 1.25, 20.0  # peak memory past 25% and 20 MiB fails
REPEAT_BELOW = 20.0  # commands under this many CPU seconds run three times, longer ones twice
#: the JSON keys whose values differ between two runs of the same command on the same data
VOLATILE = re.compile(r"(seconds|elapsed|timestamp|date|version|source|path|file|database|wall|started|finished)",
                      re.I)
#: markers of documented commands that need what a bench run has not (the docs test's list, same reasons)
NEEDS = ("serve-sim", "--base-url", "demo-output/sim.sqlite", "results/*", "model_judgment/", "ae.csv", "arena.csv")

#: real files: (id, evalgauge arguments with {shared} and {tmp}, a file that must exist under ../shared/data)
REAL = [
    ("example-alpacaeval-analyze", "analyze {root}/examples/alpacaeval/alpacaeval_5x805x2.csv --drop-missing --json -",
     None),
    ("example-alpacaeval-compare", "compare {root}/examples/alpacaeval/alpacaeval_5x805x2.csv --drop-missing --json -",
     None),
    ("real-alpacaeval-58-compare", "compare {shared}/alpaca_eval_annotations/alpaca_eval_annotations_long.csv "
     "--keep annotator=weighted_alpaca_eval_gpt4_turbo --drop-missing --json -",
     "alpaca_eval_annotations/alpaca_eval_annotations_long.csv"),
    ("real-triviaqa-import", "import wide {shared}/judging_the_judges_triviaqa/triviaqa_judgments_v2.csv --id "
     "system=exam_model --id item=question_id --columns judge=JudgeLM,Gemma-2B,Llama3-70B,Llama-70B -o "
     "{tmp}/triviaqa.csv", "judging_the_judges_triviaqa/triviaqa_judgments_v2.csv"),
    ("real-triviaqa-analyze", "analyze {tmp}/triviaqa.csv --drop-missing --json -",
     "judging_the_judges_triviaqa/triviaqa_judgments_v2.csv"),
    ("real-arena-hard-import", "import arena-hard {shared}/importers/arena-hard/gpt-3.5-turbo-0125/"
     "Nexusflow__Athene-V2-Chat.jsonl --baseline gpt-4-0314 -o {tmp}/arena.csv",
     "importers/arena-hard/gpt-3.5-turbo-0125/Nexusflow__Athene-V2-Chat.jsonl"),
    ("real-arena-hard-pairwise", "pairwise {tmp}/arena.csv --json -",
     "importers/arena-hard/gpt-3.5-turbo-0125/Nexusflow__Athene-V2-Chat.jsonl"),
    ("real-mt-bench-import", "import mt-bench {shared}/importers/mt-bench/phi-3-dpo_stefanstud/gpt-4_single.jsonl "
     "-o {tmp}/mtbench.csv", "importers/mt-bench/phi-3-dpo_stefanstud/gpt-4_single.jsonl"),
    ("real-mt-bench-analyze", "analyze {tmp}/mtbench.csv --drop-missing --json -",
     "importers/mt-bench/phi-3-dpo_stefanstud/gpt-4_single.jsonl"),
    ("real-inspect-import", "import inspect {root}/tests/fixtures/importers/inspect/panel-0.3.285 -o "
     "{tmp}/inspect.csv", None),
    ("real-inspect-analyze", "analyze {tmp}/inspect.csv --json -", None),
    ("real-lm-eval-import", "import lm-eval {root}/tests/fixtures/importers/lm-eval/"
     "meta-llama__Meta-Llama-3-8B-Instruct/samples_asdiv_2024-08-21T03-44-09.494230.jsonl -o {tmp}/lmeval.csv",
     None),
    ("real-lm-eval-analyze", "analyze {tmp}/lmeval.csv --json -", None),
    ("real-helm-import", "import helm {root}/tests/fixtures/importers/helm -o {tmp}/helm.csv", None),
    ("real-eee-export", "export {root}/tests/fixtures/importers/eee/popularity/openai/gpt-4o-mini-2024-07-18/"
     "9598a50e-1671-4bef-a373-d7dd8a38fabe.json --format eee -o {tmp}/eee.json", None),
]


def documented_commands() -> list[tuple[str, str]]:
    """(id, command) of every runnable ``.venv/bin/evalgauge`` line in the README and the site's pages."""
    pages = [ROOT / "README.md"] + [ROOT / "docs" / p for p in re.findall(
        r":\s*(\S+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M) if p != "index.md"]
    out, seen = [], set()
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].strip()
                if not line.startswith(".venv/bin/evalgauge") or any(m in line for m in NEEDS) or line in seen:
                    continue
                seen.add(line)
                words = shlex.split(line)[1:]
                slug = re.sub(r"[^a-z0-9]+", "-", " ".join(w.rsplit("/", 1)[-1] for w in words[:3]).lower())
                tag = hashlib.sha256(" ".join(words).encode()).hexdigest()[:6]  # the command, not its place
                out.append((f"doc-{slug.strip('-')[:44]}-{tag}", line))
    return out


def _scrub(value):
    """The numbers of a JSON value without what differs run to run, rounded to 5 significant digits (within
    1e-12 of 0, a quantity that is 0 but for rounding, as 0)."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in sorted(value.items()) if not VOLATILE.search(k)}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, float):
        return 0.0 if abs(value) < 1e-12 else float(f"{value:.5g}")
    if isinstance(value, str):  # notes carry timings and paths: keep their words, not those
        return re.sub(r"\d+(\.\d+)? ?(s|ms|seconds)\b|/[^\s,;)]+", "", value)
    return value


def digest(stdout: str, written: list[Path]) -> str | None:
    """The digest of the JSON on stdout or of the JSON/CSV files the command wrote; None when it wrote neither."""
    parts = []
    text = stdout.strip()
    if text.startswith(("{", "[")):
        with contextlib.suppress(json.JSONDecodeError):  # a table that starts with a bracket: no digest
            parts.append(json.dumps(_scrub(json.loads(text)), sort_keys=True))
    for path in written:
        if path.suffix == ".json" and path.is_file():
            parts.append(json.dumps(_scrub(json.loads(path.read_text())), sort_keys=True))
        elif path.suffix == ".csv" and path.is_file():
            parts.append(_csv_digest_text(path))
    if not parts:
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _csv_digest_text(path: Path) -> str:
    """A CSV's cells with its numbers rounded as the JSON's are."""
    def cell(v: str) -> str:
        try:
            return f"{float(v):.5g}"
        except ValueError:
            return v
    return "\n".join(",".join(cell(v) for v in line.split(",")) for line in path.read_text().splitlines())


def outputs_of(argv: list[str], cwd: Path) -> list[Path]:
    """The files a command names as its outputs (-o/--out/--json PATH/--report)."""
    out = []
    for k, word in enumerate(argv[:-1]):
        if word in ("-o", "--out", "--json", "--report") and argv[k + 1] != "-":
            out.append(cwd / argv[k + 1])
    return out


def run_once(argv: list[str], cwd: Path, source: Path | None = None) -> tuple[float, float, str, int, str]:
    """(CPU s, peak MiB, stdout, exit code, stderr tail) of one run of ``python -m evalgauge argv``; with
    ``source``, the package imported from that ``src`` folder instead of the installed one."""
    env = environment(source, {**os.environ, "COLUMNS": "120", "PYTHONHASHSEED": "0"})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "evalgauge", *argv], cwd=cwd, stdout=out, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        out.seek(0)
        err.seek(0)
        code = os.waitstatus_to_exitcode(status)
        return (usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, out.read().decode(errors="replace"), code,
                err.read().decode(errors="replace")[-400:])


class Run(NamedTuple):
    cpu_s: float
    peak_mib: float
    code: int
    err: str
    digest: str | None


def measure(case_id: str, argv: list[str], cwd: Path, reference: Path | None = None) -> dict:
    """A case's figures (fastest run) with the installed code; with ``reference`` (a release's ``src``), also
    the release's figures under ``"reference"``, the two run alternately so that both see the same machine."""
    # the release's run first in each round: the installed code's is the last to write a case's output files,
    # which later cases read (an import's CSV, then its analysis)
    sides = {**({"reference": reference} if reference is not None else {}), "now": None}
    runs: dict[str, list[Run]] = {side: [] for side in sides}
    for _ in range(3):
        for side, source in sides.items():
            done = runs[side]
            if done and (done[-1].code != 0 or len(done) >= (3 if done[0].cpu_s < REPEAT_BELOW else 2)):
                continue
            for path in outputs_of(argv, cwd):  # a command refuses to replace an output a previous run wrote
                path.unlink(missing_ok=True)
            cpu, mem, stdout, code, err = run_once(argv, cwd, source)
            done.append(Run(cpu, mem, code, err, digest(stdout, outputs_of(argv, cwd)) if code in (0, 3) else None))
    now = {"id": case_id, **_figures(runs["now"])}
    if reference is not None:
        now["reference"] = _figures(runs["reference"])
    return now


def _figures(runs: list[Run]) -> dict:
    """The fastest run's CPU and the smallest peak of a side's runs, the last run's digest, or its failure."""
    last = runs[-1]
    if last.code not in (0, 3):  # balance exits 3 on an incomplete block by design
        return {"error": f"exit {last.code}: {last.err.strip()[-300:]}"}
    return {"cpu_s": round(min(r.cpu_s for r in runs), 3), "peak_mib": round(min(r.peak_mib for r in runs), 1),
            "digest": last.digest, "runs": len(runs)}


def cases(tmp: Path) -> list[tuple[str, list[str], Path | None]]:
    """(id, argv, why skipped or None) of every case, documented commands first."""
    out = [(cid, shlex.split(line)[1:], None) for cid, line in documented_commands()]
    for cid, args, needs in REAL:
        missing = needs is not None and not (SHARED / needs).exists()
        text = args.format(shared=SHARED, tmp=tmp, root=ROOT)
        out.append((cid, shlex.split(text), SHARED / needs if missing else None))
    return out


def unreleased_mentions() -> set[str]:
    """Case ids named in backticks under CHANGELOG.md's "Unreleased" heading: changed numbers said there pass."""
    if not CHANGELOG.exists():
        return set()
    text = CHANGELOG.read_text(encoding="utf-8")
    match = re.search(r"^## Unreleased\s*$(.*?)(^## |\Z)", text, flags=re.M | re.S)
    return set(re.findall(r"`([a-z0-9-]+)`", match.group(1))) if match else set()


def verdict(now: dict, then: dict | None, explained: set[str]) -> list[str]:
    if "error" in now:
        return [f"failed: {now['error']}"]
    if then is None:
        return ["new (no stored figures)"]
    bad = []
    if now["cpu_s"] > CPU_SLACK * then["cpu_s"] + CPU_FLOOR:
        bad.append(f"CPU {now['cpu_s']:.2f} s vs {then['cpu_s']:.2f} s ({now['cpu_s'] / then['cpu_s']:.2f}x)")
    if now["peak_mib"] > MEM_SLACK * then["peak_mib"] + MEM_FLOOR:
        bad.append(f"peak {now['peak_mib']:.0f} MiB vs {then['peak_mib']:.0f} MiB")
    if now["digest"] != then.get("digest") and now["id"] not in explained:
        bad.append(f"numbers changed ({then.get('digest')} -> {now['digest']}) and CHANGELOG.md's Unreleased "
                   "section does not name this case")
    return bad


def against(now: dict, then: dict | None) -> tuple[dict | None, str]:
    """What a case is judged against: the release's code run here when it ran, else the stored figures."""
    ref = now.get("reference")
    if ref is not None and "error" not in ref:
        return ref, "release here"
    return then, "stored"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="store today's figures as the baseline")
    parser.add_argument("--only", help="case ids (or prefixes), comma-separated")
    parser.add_argument("--table", type=Path, help="also write the results as a markdown table to this file")
    parser.add_argument("--stored", action="store_true",
                        help="judge against the stored figures only, without running the release's code")
    args = parser.parse_args()
    stored = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"cases": {}}
    explained = unreleased_mentions()
    results, failed, skipped, said_why = [], [], [], set()
    with tempfile.TemporaryDirectory() as tmp_name, \
            tempfile.TemporaryDirectory(dir=ROOT, prefix=".bench-release-") as releases:
        tmp = Path(tmp_name)
        for name in ("tests", "examples"):  # the documented commands' relative paths
            (tmp / name).symlink_to(ROOT / name)
        (tmp / "demo-output").mkdir()
        for cid, argv, missing in cases(tmp):
            if args.only and not any(cid.startswith(p) for p in args.only.split(",")):
                continue
            if missing is not None:
                skipped.append(f"{cid}: {missing} is not present")
                continue
            then = stored["cases"].get(cid)
            source = None
            if then is not None and not (args.record or args.stored):
                source, why = source_of(then.get("commit") or stored.get("commit"), Path(releases))
                if why and why not in said_why:
                    said_why.add(why)
                    print(f"note: {why}: judged against the stored figures")
            started = time.perf_counter()
            now = measure(cid, argv, tmp, source)
            now["wall_s"] = round(time.perf_counter() - started, 1)
            base, label = against(now, then)
            problems = [] if args.record else verdict(now, base, explained)
            if "error" in now.get("reference", {}):
                problems.append(f"the release's code failed here ({now['reference']['error'][:80]}): "
                                "judged against the stored figures")
            bad = [p for p in problems if not p.startswith(("new", "the release's"))]
            if bad:
                failed.append(cid)
            results.append((now, problems))
            said = "; ".join(problems) or "ok"
            if "error" in now:
                print(f"{cid:<62} {said}")
            else:
                base = base or {}
                ratio = now["cpu_s"] / base["cpu_s"] if base.get("cpu_s") else float("nan")
                print(f"{cid:<62} {now['cpu_s']:7.2f} s  {now['peak_mib']:6.0f} MiB  ({label} "
                      f"{base.get('cpu_s', float('nan')):.2f} s, {base.get('peak_mib', float('nan')):.0f} MiB; "
                      f"CPU {ratio:.2f}x)  {said}", flush=True)
    for line in skipped:
        print(f"skipped {line}")
    if args.table:
        _write_table(args.table, results, stored)
    if args.record:
        errors = [now["id"] for now, _ in results if "error" in now]
        if errors:
            print(f"not recorded: {', '.join(errors)} failed")
            return 1
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        fresh = {now["id"]: {k: now[k] for k in ("cpu_s", "peak_mib", "digest")} for now, _ in results}
        if args.only:  # cases added since the release: recorded with their own commit, the release's stamp kept
            fresh = {cid: {**figures, "commit": commit} for cid, figures in fresh.items()}
            record = {**stored, "cases": {**stored["cases"], **fresh}}
        else:
            record = {"recorded": time.strftime("%Y-%m-%d"), "commit": commit, "cases": {**stored["cases"], **fresh}}
        BASELINE.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(results)} cases in {BASELINE.relative_to(ROOT)} (commit {commit})")
        return 0
    print(f"{len(results)} cases, {len(failed)} failed, {len(skipped)} skipped; baseline {stored.get('commit')} "
          f"({stored.get('recorded')})")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


def _write_table(path: Path, results, stored) -> None:
    """Today's figures beside what each case was judged against (the release's code run here, or stored)."""
    lines = ["| case | CPU (s) | peak (MiB) | against | its CPU (s) | its peak (MiB) | CPU ratio | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for now, problems in results:
        if "error" in now:
            lines.append(f"| `{now['id']}` | | | | | | | {now['error'][:60]} |")
            continue
        base, label = against(now, stored["cases"].get(now["id"]))
        base = base or {}
        ratio = f"{now['cpu_s'] / base['cpu_s']:.2f}" if base.get("cpu_s") else ""
        lines.append(f"| `{now['id']}` | {now['cpu_s']:.2f} | {now['peak_mib']:.0f} | {label} | "
                     f"{base.get('cpu_s', '')} | {base.get('peak_mib', '')} | {ratio} | "
                     f"{'; '.join(problems) or 'ok'} |")
    path.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
