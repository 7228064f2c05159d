"""Real model completions for the math verifier's real-output benchmark (``verifier_real_bench.py``).

Every completion here was written by a model and committed by another project (evaluation dumps); none is
written by us and none comes from Math-Verify's test suite. Each row records its source repository, commit,
path and licence. Rows whose licence allows redistribution (MIT) are committed in
``benchmarks/data/real_outputs.jsonl`` with their text; the others (no licence file: all rights reserved) are
committed as labels only (id, gold, expected) and their text is rebuilt from the pinned commit by this script::

    .venv/bin/python benchmarks/real_outputs_corpus.py --build   # git-clones the sources (or --mirror DIR)

Sources (``SOURCES``; rows are picked deterministically, see each ``_rows_*``):
    * ``openai/grade-school-math`` ``example_model_solutions.jsonl`` (MIT): GPT-3 6B/175B fine-tuned and
      verifier-ranked GSM8K solutions, Q:/A: format ending ``A: N`` (Cobbe et al. 2021).
    * ``TIGER-AI-Lab/TheoremQA`` ``outputs/*.jsonl`` (MIT): Mistral-7B and InternLM2(-Math)-20B 5-shot
      TheoremQA outputs ending ``The answer is X``, often followed by an invented next ``Problem:`` or by
      ``This answer is correct.`` lines (Chen et al. 2023).
    * ``microsoft/ToRA`` ``src/outputs/llm-agents/*/gsm8k/*.jsonl`` (MIT): ToRA-70B / ToRA-Code-34B
      tool-integrated GSM8K solutions (program, output block, ``\\boxed{}`` sentence; Gou et al. 2023).
    * ``kojima-takeshi188/zero_shot_cot`` ``log/*_zero_shot_cot.log`` (no licence: labels only): GPT-3
      zero-shot chain of thought on GSM8K / MultiArith / AddSub / SVAMP, ending ``Therefore, the answer (arabic
      numerals) is N.`` (the answer trigger is the method's second prompt; Kojima et al. 2022).
    * ``NafisSadeq/aime-reasoning-summaries`` ``aime.json`` (no licence: labels only): OpenAI o3 answers to
      AIME 2025 (the visible answer, not the reasoning summaries).
    * ``AGI-Edgerunners/Plan-and-Solve-Prompting`` ``generated_result/*.json`` (no licence: labels only):
      text-davinci-003 zero-shot PS+ reasoning on GSM8K / SVAMP / AQuA / MultiArith / SingleEq, ending in an
      ``Answer:`` line or a sentence under a bare ``Answer:`` (Wang et al. 2023); AQuA rows carry their five options.
    * ``TIGER-AI-Lab/MMLU-Pro`` ``eval_results/{deepseek,gpt4o}/math_result.json`` at ``eeeb46c`` (Apache-2.0):
      DeepSeek-V2 and GPT-4o 5-shot CoT on MMLU-Pro math, ending ``The answer is (X)``, with the ten options
      (Wang et al. 2024).

    * ``lupantech/MathVista`` ``results/{gpt4,claude}/output_*_2shot_solution_use_ocr.json`` (CC BY-SA 4.0: labels
      only, the share-alike text and options are rebuilt by ``--build``): GPT-4 and Claude-2 2-shot chain of thought
      on MathVista testmini from the image's OCR text; a multiple-choice gold is an option's text (Lu et al. 2024).

A multiple-choice row carries its options (``choices``, in letter order) as a task record would.

Labels: each row's ``expected`` starts as the source's own grade where it has one (GSM8K ``is_correct``,
ToRA's ``pred`` vs ``gt``, zero-shot-CoT's ``pred_after`` vs ``GT``, TheoremQA's ``pred`` against its
gold, Plan-and-Solve's ``ans``, MMLU-Pro's ``pred`` vs ``answer``, MathVista's ``true_false``) and every row where that grade, Ratchet and Math-Verify do not all agree was read and labelled by hand
(``label_note`` says why when the hand label differs from the source's grade). A completion counts as right
when it states one final answer equal to the gold; a retracted, hedged or cut-off answer is not right.

Split: ``split(row_id)`` puts each row in ``tune`` or ``heldout`` by a hash of its id (about half each); the
verifier was tuned only on the ``tune`` half, and the held-out figure is the one to quote. (The three sources added
for ``math-1.5.0`` were read whole while labelling, so their held-out half is not blind.)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "real_outputs.jsonl"
BUILT = Path(__file__).resolve().parent / "data" / "real_outputs_built.jsonl"  # rebuilt rows (git-ignored)

Row = dict[str, object]


def split(row_id: str) -> str:
    """``"tune"`` or ``"heldout"`` for a row id (first byte of its sha256: even -> tune)."""
    return "tune" if hashlib.sha256(row_id.encode()).digest()[0] % 2 == 0 else "heldout"


class Source:
    """One public repository at a pinned commit, with its licence and how to read rows out of it."""

    def __init__(self, repo: str, commit: str, licence: str, redistributable: bool, rows: Callable[[Source], Iterator[Row]]):
        self.repo, self.commit, self.licence, self.redistributable, self._rows = repo, commit, licence, redistributable, rows
        self.git_dir: Path | None = None

    def show(self, path: str) -> str:
        """The text of ``path`` at the pinned commit."""
        assert self.git_dir is not None, "call locate() first"
        out = subprocess.run(
            ["git", "--git-dir", str(self.git_dir), "show", f"{self.commit}:{path}"], capture_output=True, check=True
        )
        return out.stdout.decode("utf-8")

    def locate(self, mirror: Path | None, cache: Path) -> None:
        """Find a local clone (``mirror/<owner>+<name>/repo``) or clone the repository into ``cache``."""
        name = self.repo.replace("/", "+")
        for cand in ([mirror / name / "repo", mirror / name] if mirror else []) + [cache / name]:
            if (cand / "HEAD").exists() or (cand / ".git").exists():
                self.git_dir = cand if (cand / "HEAD").exists() else cand / ".git"
                return
        dest = cache / name
        subprocess.run(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{self.repo}", str(dest)], check=True)
        self.git_dir = dest

    def rows(self) -> Iterator[Row]:
        for r in self._rows(self):
            yield {"source": self.repo, "commit": self.commit, "licence": self.licence, **r}


def _gsm_gold(ground_truth: str) -> str:
    return ground_truth.rsplit("A:", 1)[-1].strip().replace(",", "")


def _rows_gsm8k(src: Source) -> Iterator[Row]:
    path = "grade_school_math/data/example_model_solutions.jsonl"
    configs = ["6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification"]
    for i, line in enumerate(src.show(path).splitlines()[:100]):
        d = json.loads(line)
        cfg = configs[i % 4]  # one model per question, cycling: 25 questions each
        yield {
            "id": f"gsm8k-solutions-{i}-{cfg}",
            "path": path,
            "model": f"GPT-3 {cfg.replace('_', ' ')}",
            "gold": _gsm_gold(d["ground_truth"]),
            "completion": d[cfg]["solution"],
            "source_grade": bool(d[cfg]["is_correct"]),
        }


def _theoremqa_gold(correct: list) -> tuple[str, object]:
    """(the gold as TheoremQA writes it, its typed value: a number, a list, or a bool for a True/False answer)."""
    text = str(correct[0])
    value = correct[1] if len(correct) > 1 and correct[1] is not None else {"True": True, "False": False}.get(text, text)
    return text, value


def _theoremqa_grade(pred: str, gold: object) -> bool:
    """TheoremQA's own check, restated: a number within 4% relative (their ``compare_answer_with_groundtruth``),
    a bool or list by equality of the written values."""
    pred = pred.strip().strip("$").strip()
    if isinstance(gold, bool):
        return pred.lower() in (("true", "yes") if gold else ("false", "no"))
    if isinstance(gold, (int, float)):
        try:
            p = float(pred)
        except ValueError:
            return False
        return abs(p - gold) <= 0.04 * abs(gold) if gold else abs(p) < 1e-6
    return pred.replace(" ", "") == str(gold).replace(" ", "")


def _rows_theoremqa(src: Source) -> Iterator[Row]:
    files = [
        "outputs/Mistral_7B_v0.1_5shots_mistral.jsonl",
        "outputs/Mistral_7B_Base_V0.2_5shots_mistral.jsonl",
        "outputs/internlm2_20b_5shots_short.jsonl",
        "outputs/internlm2_math_20b_5shots_short.jsonl",
    ]
    for f in files:
        lines = src.show(f).splitlines()
        for k in range(20):  # every 40th question: 20 per model
            i = 7 + 40 * k
            d = json.loads(lines[i])
            text, gold = _theoremqa_gold(d["correct"])
            yield {
                "id": f"theoremqa-{Path(f).stem}-{i}",
                "path": f,
                "model": Path(f).stem,
                "gold": text,
                "completion": d["solution"],
                "source_grade": _theoremqa_grade(str(d.get("pred", "")), gold),
            }


def _rows_tora(src: Source) -> Iterator[Row]:
    files = [
        "src/outputs/llm-agents/tora-70b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl",
        "src/outputs/llm-agents/tora-code-34b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl",
    ]
    for f in files:
        lines = src.show(f).splitlines()
        for k in range(30):  # every 43rd problem: 30 per model
            i = 3 + 43 * k
            d = json.loads(lines[i])
            pred = str((d.get("pred") or [""])[0])
            try:
                grade = abs(float(pred) - float(d["gt"])) < 1e-6
            except ValueError:
                grade = False
            yield {
                "id": f"tora-{f.split('/')[2]}-{d['idx']}",
                "path": f,
                "model": f.split("/")[2],
                "gold": str(d["gt"]),
                "completion": d["code"][0],
                "source_grade": grade,
            }


_BLOCK = re.compile(r"A: Let's think step by step\.(.*?)\npred_before :.*?\npred_after : (.*?)\n.*?\nGT : (.*?)\n", re.S)


def _rows_zero_shot_cot(src: Source) -> Iterator[Row]:
    for f, step in (
        ("log/gsm8k_zero_shot_cot.log", 61),
        ("log/multiarith_zero_shot_cot.log", 31),
        ("log/addsub_zero_shot_cot.log", 29),
    ):
        blocks = list(_BLOCK.finditer(src.show(f)))
        for k, m in enumerate(blocks[5::step][:20]):  # 20 per task
            completion, pred, gt = m.group(1).strip(), m.group(2).strip(), m.group(3).strip()
            try:
                grade = abs(float(pred) - float(gt)) < 1e-6
            except ValueError:
                grade = False
            yield {
                "id": f"zero-shot-cot-{Path(f).stem}-{k}",
                "path": f,
                "model": "GPT-3 (the log's gpt3-xl setting), zero-shot CoT",
                "gold": gt,
                "completion": completion,
                "source_grade": grade,
            }


def _rows_aime(src: Source) -> Iterator[Row]:
    for i, d in enumerate(json.loads(src.show("aime.json"))):
        yield {
            "id": f"aime-o3-{i}",
            "path": "aime.json",
            "model": "o3",
            "gold": str(d["ground_truth"]),
            "completion": d["output"],
            "source_grade": None,
        }


def _number_gold(x: object) -> str:
    """A float gold as its shortest exact decimal (``18.0`` -> ``18``, ``2.5`` -> ``2.5``)."""
    v = float(x)  # type: ignore[arg-type]
    return str(int(v)) if v.is_integer() else repr(v)


_AQUA_OPTION = re.compile(r"\(([A-E])\)\s*(.*?)\s*(?=\([A-E]\)|$)", re.S)


def _rows_plan_and_solve(src: Source) -> Iterator[Row]:
    """text-davinci-003 zero-shot Plan-and-Solve (PS+) outputs: the first-stage reasoning (``chain-of-thought``),
    whose plan ends in an ``Answer:`` line or a sentence under it; AQuA rows carry their five options."""
    files = (
        ("generated_result/gsm8k-zero_shot-305-text-davinci-003.json", 20),
        ("generated_result/SVAMP-zero_shot-307-text-davinci-003.json", 15),
        ("generated_result/AQuA-zero_shot-305-text-davinci-003.json", 20),
        ("generated_result/MultiArith-zero_shot-302-text-davinci-003.json", 10),
        ("generated_result/SingleEq-zeri_shot-301-text-davinci-003.json", 10),
    )
    for f, n in files:
        data = json.loads(src.show(f))
        step = len(data) // n
        task = Path(f).name.split("-")[0]
        for d in data[3::step][:n]:
            row: Row = {
                "id": f"plan-and-solve-{task}-{d['ID']}",
                "path": f,
                "model": "text-davinci-003, zero-shot PS+",
                "completion": d["chain-of-thought"].strip(),
                "source_grade": bool(d["ans"]),
            }
            if task == "AQuA":
                options = d["question"].split("Answer Choices:")[-1]
                row["gold"] = str(d["answer"])
                row["choices"] = [m.group(2) for m in _AQUA_OPTION.finditer(options)]
            else:
                row["gold"] = _number_gold(d["answer"])
            yield row


def _rows_mmlu_pro(src: Source) -> Iterator[Row]:
    """MMLU-Pro math: DeepSeek-V2 and GPT-4o 5-shot chain-of-thought answers ending ``The answer is (X)``, with the
    ten options (Wang et al. 2024); gold is the option letter."""
    for model in ("deepseek", "gpt4o"):
        f = f"eval_results/{model}/math_result.json"
        data = json.loads(src.show(f))
        for d in data[11::53][:25]:
            options = d["options"]
            yield {
                "id": f"mmlu-pro-{model}-{d['question_id']}",
                "path": f,
                "model": {"deepseek": "DeepSeek-V2", "gpt4o": "GPT-4o"}[model],
                "gold": str(d["answer"]),
                "choices": [str(o) for o in (ast.literal_eval(options) if isinstance(options, str) else options)],
                "completion": str(d["response"]).strip(),
                "source_grade": d.get("pred") == d["answer"],
            }


def _rows_mathvista(src: Source) -> Iterator[Row]:
    """MathVista testmini: GPT-4 and Claude-2 2-shot chain-of-thought answers from the image's OCR text (the "text"
    setting), ending ``the answer is A (6cm)`` or a value; multiple-choice golds are an option's text, with the
    options (Lu et al. 2024)."""
    for model, f in (
        ("GPT-4", "results/gpt4/output_gpt4_2shot_solution_use_ocr.json"),
        ("Claude-2", "results/claude/output_claude_2shot_solution_use_ocr.json"),
    ):
        data = json.loads(src.show(f))
        for pid in sorted(data, key=int)[7::40][:25]:
            d = data[pid]
            row: Row = {
                "id": f"mathvista-{model.lower()}-{pid}",
                "path": f,
                "model": f"{model}, 2-shot CoT on OCR text",
                "gold": str(d["answer"]),
                "completion": str(d.get("response") or "").strip(),
                "source_grade": str(d.get("true_false")) == "True",
            }
            if d.get("question_type") == "multi_choice" and isinstance(d.get("choices"), list):
                row["choices"] = [str(c) for c in d["choices"]]
            yield row


SOURCES = [
    Source("openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c", "MIT", True, _rows_gsm8k),
    Source("TIGER-AI-Lab/TheoremQA", "acfc9686aa9b49f3c8f189364a9a9ee9c53da039", "MIT", True, _rows_theoremqa),
    Source("microsoft/ToRA", "213c1c995038c73fab10343814df7a42f990f026", "MIT", True, _rows_tora),
    Source(
        "kojima-takeshi188/zero_shot_cot",
        "5ef330fcdeec0cd26aee27943504f91f8ec1c33c",
        "none (all rights reserved)",
        False,
        _rows_zero_shot_cot,
    ),
    Source(
        "NafisSadeq/aime-reasoning-summaries",
        "f87edfc91196d8f04ad81edae652bb1080cd0100",
        "none (all rights reserved)",
        False,
        _rows_aime,
    ),
    Source(
        "AGI-Edgerunners/Plan-and-Solve-Prompting",
        "9d5a176f5b4de1011d426009ab6398dc76046e88",
        "none (all rights reserved)",
        False,
        _rows_plan_and_solve,
    ),
    Source("TIGER-AI-Lab/MMLU-Pro", "eeeb46ca13acc9e60ce45a8dc2fb141ee76600ab", "Apache-2.0", True, _rows_mmlu_pro),
    Source(
        "lupantech/MathVista",
        "53d525874bdde205128e6b160b7357a88277d479",
        "CC BY-SA 4.0 (labels only: share-alike text kept out of this repository)",
        False,
        _rows_mathvista,
    ),
]


def build(mirror: Path | None, cache: Path) -> list[Row]:
    """Every row of every source, read from the pinned commits (clones them into ``cache`` when not mirrored)."""
    out: list[Row] = []
    for src in SOURCES:
        src.locate(mirror, cache)
        out += list(src.rows())
    return out


def load() -> list[Row]:
    """The labelled rows: committed text, plus the rebuilt text of labels-only rows (``--build``) where present.

    Raises:
        FileNotFoundError: the committed data file is missing.
    """
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    built = {r["id"]: r for r in map(json.loads, BUILT.read_text().splitlines())} if BUILT.exists() else {}
    for r in rows:
        if r.get("completion") is None and r["id"] in built:
            r["completion"] = built[r["id"]]["completion"]
            if "choices" in built[r["id"]]:
                r["choices"] = built[r["id"]]["choices"]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", action="store_true", help="rebuild the labels-only rows' text from their pinned commits")
    ap.add_argument("--mirror", type=Path, default=None, help="folder of local clones named <owner>+<name>[/repo]")
    ap.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "ratchet" / "real_outputs")
    args = ap.parse_args()
    if not args.build:
        ap.error("nothing to do: pass --build")
    args.cache.mkdir(parents=True, exist_ok=True)
    rows = build(args.mirror, args.cache)
    restricted = {s.repo for s in SOURCES if not s.redistributable}
    BUILT.write_text(
        "".join(
            json.dumps({"id": r["id"], "completion": r["completion"], **({"choices": r["choices"]} if "choices" in r else {})})
            + "\n"
            for r in rows
            if r["source"] in restricted
        )
    )
    print(f"rebuilt {sum(r['source'] in restricted for r in rows)} labels-only rows into {BUILT}", file=sys.stderr)


if __name__ == "__main__":
    main()
