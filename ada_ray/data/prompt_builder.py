"""Validated records -> tokenized, de-duplicated prompts, a chunk at a time, in bounded memory.

`PromptBuilder` renders and tokenizes each question (raw text, or the paper's math template through
the tokenizer's chat template), drops prompts over `data.max_prompt_tokens` (and questions too long to
be worth tokenizing), and drops repeats of a question with the same answer, counting both. It
remembers 16 bytes per prompt kept (`SeenIds`: 64-bit keys of the id and of the answer), so a
million-row file streams through it; when a repeat is an error (the same id twice, the same question
with another answer), the first occurrence is found again by re-reading the records, for the message.
"""

from __future__ import annotations

import hashlib
from typing import Callable, Iterable, Optional

import numpy as np

from ada_ray.algo.types import Prompt
from ada_ray.config import DataConfig
from ada_ray.errors import InputError


class DataError(InputError, ValueError):
    """A dataset problem; the message names the file, line or field."""


CHUNK = 1024  # records tokenized together


def content_id(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def key64(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def _user_text(question: str) -> str:
    return f"{question} Let's think step by step and output the final answer within \\boxed{{}}."


def render_prompt(question: str, cfg: DataConfig, tokenizer) -> list[int]:
    """Token ids of the prompt: raw text, or the paper's math template (chat template if any)."""
    return render_prompts([question], cfg, tokenizer)[0]


def render_prompts(questions: list[str], cfg: DataConfig, tokenizer) -> list[list[int]]:
    """`render_prompt` of many questions, tokenized in one call where the template allows."""
    if not questions:
        return []
    if cfg.prompt_template == "raw":
        return [list(x) for x in tokenizer(questions)["input_ids"]]
    if getattr(tokenizer, "chat_template", None):
        out = []
        for q in questions:
            msgs = [{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": _user_text(q)}]
            ids = tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            out.append(list(ids["input_ids"] if isinstance(ids, dict) else ids))
        return out
    return [list(x) for x in tokenizer([f"{cfg.system_prompt}\n\n{_user_text(q)}\n" for q in questions])["input_ids"]]


def max_chars(tokenizer, max_tokens: int) -> Optional[int]:
    """A question longer than this many characters cannot fit in `max_tokens` tokens: no token spells
    more than the vocabulary's longest piece (x2 for normalizers). Such a question (a huge line) is
    dropped without tokenizing it, which could take minutes. None when the vocabulary is unknown."""
    try:
        longest = max(map(len, tokenizer.get_vocab()))
    except Exception:  # noqa: BLE001 - no vocabulary to read (a stand-in tokenizer)
        return None
    return 2 * max(longest, 1) * max_tokens


class SeenIds:
    """Prompt ids seen so far and a key of each one's answer: 16 bytes a prompt in two sorted uint64
    arrays, plus a dict of the newest ids, merged into the arrays every `merge_every`."""

    def __init__(self, merge_every: int = 65536):
        self.ids = np.empty(0, np.uint64)
        self.answers = np.empty(0, np.uint64)
        self.recent: dict[int, int] = {}
        self.merge_every = merge_every

    def __len__(self) -> int:
        return len(self.ids) + len(self.recent)

    def answer_of(self, id_key: int) -> Optional[int]:
        """The answer key stored with this id, or None when the id is new."""
        if id_key in self.recent:
            return self.recent[id_key]
        i = int(np.searchsorted(self.ids, np.uint64(id_key)))
        if i < len(self.ids) and int(self.ids[i]) == id_key:
            return int(self.answers[i])
        return None

    def add(self, id_key: int, answer_key: int) -> None:
        self.recent[id_key] = answer_key
        if len(self.recent) >= self.merge_every:
            self._merge()

    def _merge(self) -> None:
        ids = np.concatenate([self.ids, np.fromiter(self.recent.keys(), np.uint64, len(self.recent))])
        answers = np.concatenate([self.answers, np.fromiter(self.recent.values(), np.uint64, len(self.recent))])
        order = np.argsort(ids, kind="stable")
        self.ids, self.answers, self.recent = ids[order], answers[order], {}


class PromptBuilder:
    """Feed it records (`add`), collect the prompts it returns, then `finish`. `rescan` re-reads the
    records from the start (used only to name the first occurrence of a refused repeat)."""

    def __init__(self, cfg: DataConfig, tokenizer, source: str, rescan: Callable[[], Iterable]):
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.source = source
        self.rescan = rescan
        self.max_chars = max_chars(tokenizer, cfg.max_prompt_tokens)
        self.seen = SeenIds()
        self.kept = 0
        self.dropped_too_long = 0
        self.dropped_duplicates = 0

    def _first(self, prompt_id: str):
        return next(r for r in self.rescan() if r.prompt_id == prompt_id)

    def add(self, records: list) -> list[Prompt]:
        """The prompts kept from these records (a chunk: they are tokenized together)."""
        fits = []
        for r in records:
            if self.max_chars is not None and len(r.question) > self.max_chars:
                self.dropped_too_long += 1
            else:
                fits.append(r)
        out = []
        for r, ids in zip(fits, render_prompts([r.question for r in fits], self.cfg, self.tokenizer)):
            if len(ids) > self.cfg.max_prompt_tokens:
                self.dropped_too_long += 1
                continue
            pid = r.prompt_id
            id_key, answer_key = key64(pid), key64(r.answer)
            seen_answer = self.seen.answer_of(id_key)
            if seen_answer is not None:
                if r.record_id is not None:
                    raise DataError(f"{r.where}: duplicate prompt id {pid!r} (first at {self._first(pid).where})")
                if answer_key != seen_answer:
                    first = self._first(pid)
                    raise DataError(f"{r.where}: the same question as {first.where} with another answer "
                                    f"({r.answer!r:.40} here, {first.answer!r:.40} there); fix or drop one of them")
                self.dropped_duplicates += 1  # the same question twice: keep the first, count the rest
                continue
            self.seen.add(id_key, answer_key)
            self.kept += 1
            out.append(Prompt(pid, r.question, tuple(ids), r.answer, r.difficulty, r.pass_rate))
        return out

    def add_all(self, records: Iterable) -> Iterable[Prompt]:
        chunk = []
        for r in records:
            chunk.append(r)
            if len(chunk) >= CHUNK:
                yield from self.add(chunk)
                chunk = []
        yield from self.add(chunk)

    def finish(self) -> None:
        if not self.kept:
            raise DataError(f"{self.source}: no prompt fits data.max_prompt_tokens = {self.cfg.max_prompt_tokens} "
                            f"({self.dropped_too_long} dropped as too long)")
