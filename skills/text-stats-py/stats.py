"""The statistics of a text, with no host import: `python3 -m unittest`
runs it as it is. Counts as the Rust `text-stats` does."""

TOP_WORDS = 10


def is_word_char(c: str) -> bool:
    return c.isalnum() or c == "'"


def words_of(text: str):
    """Runs of word characters, apostrophes trimmed from both ends."""
    start = None
    for i, c in enumerate(text):
        if is_word_char(c):
            if start is None:
                start = i
        elif start is not None:
            yield text[start:i]
            start = None
    if start is not None:
        yield text[start:]


def line_count(text: str) -> int:
    """Lines as Rust's `str::lines` counts them: a last line without a
    newline counts, an empty text has none."""
    lines = text.count("\n")
    if text and not text.endswith("\n"):
        lines += 1
    return lines


def stats(text: str):
    """`(lines, words, bytes, top)`: `top` the `TOP_WORDS` most frequent
    lowercased words as `(word, count)`, by count, then by word."""
    counts = {}
    words = 0
    for word in words_of(text):
        word = word.strip("'")
        if not word:
            continue
        words += 1
        key = word.lower()
        counts[key] = counts.get(key, 0) + 1
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:TOP_WORDS]
    return line_count(text), words, len(text.encode("utf-8")), top
