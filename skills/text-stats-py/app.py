"""`text-stats-py`: counts the lines, words and bytes of a UTF-8 text file
read through the `fs` capability, and lists its most frequent words; the
Rust `text-stats` skill in Python, answering as it does."""

import wit_world
from wit_world import Input, Output, WordCount
from wit_world.imports import fs
from componentize_py_types import Err
from skillhost_sdk import SkillFailure, invalid_input, log, manifest, skill_run

from stats import stats

MANIFEST = manifest(
    id="text-stats-py",
    name="Text statistics (Python)",
    version="0.1.0",
    description="Counts the lines, words and bytes of a text file, and its most frequent words; text-stats in Python",
    capabilities=["log", "fs"],
    estimated_duration_ms=5,
)


class WitWorld(wit_world.WitWorld):
    def manifest(self):
        return MANIFEST

    @skill_run
    def run(self, input: Input) -> Output:
        if not input.path.strip():
            raise invalid_input("`path` is empty; give a file relative to the granted directory")
        try:
            text = fs.read_text(input.path)
        except Err as error:
            # The import's error codes (`not-found`, `invalid-utf8`…) are
            # what a scenario matches on: keep them, add only which file.
            e = error.value
            raise SkillFailure(
                e.code, f"text-stats cannot read `{input.path}`: {e.message}", e.retryable
            )
        lines, words, size, top = stats(text)
        log.info(f"{input.path}: {lines} lines, {words} words, {size} bytes")
        return Output(
            lines=lines,
            words=words,
            bytes=size,
            top_words=[WordCount(word=w, count=c) for w, c in top],
        )
