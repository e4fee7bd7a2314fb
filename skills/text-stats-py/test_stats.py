"""`python3 -m unittest`: the statistics, natively; the same cases as the
Rust `text-stats` tests."""

import unittest

from stats import stats


class StatsTest(unittest.TestCase):
    def test_counts_lines_words_and_bytes(self):
        lines, words, size, top = stats("The cat sat.\nThe dog didn't!\n\nthe end")
        self.assertEqual((lines, words, size), (4, 8, 37))
        self.assertEqual(top[:2], [("the", 3), ("cat", 1)])
        self.assertIn(("didn't", 1), top)

    def test_handles_empty_and_unicode_text(self):
        self.assertEqual(stats(""), (0, 0, 0, []))
        _, words, _, top = stats("Éte été ÉTÉ — 'quoted' x")
        self.assertEqual(words, 5)
        self.assertEqual(top[:3], [("été", 2), ("quoted", 1), ("x", 1)])

    def test_keeps_the_ten_most_frequent_words(self):
        text = "".join(f"w{i:02} " * (i + 1) for i in range(15))
        _, _, _, top = stats(text)
        self.assertEqual(len(top), 10)
        self.assertEqual(top[0], ("w14", 15))
        self.assertEqual(top[9], ("w05", 6))


if __name__ == "__main__":
    unittest.main()
