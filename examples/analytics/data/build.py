#!/usr/bin/env python3
"""Builds the analytics example's three data sources from the CSV files the
`palmerpenguins` PyPI package (0.1.6) ships:

  penguins.db       SQLite: table `penguins`, one row per penguin of
                    penguins.csv (NA becomes NULL), in the file's order
  graph/graph.json  nodes (species, islands, study years) and edges
                    (`lives-on`: species to island; `sampled-in`: island to
                    year), each edge weighted by the penguins it rests on
  docs/*.txt        documentation: the package's own description of the
                    dataset (overview, licence, citation), verbatim, and a
                    fact sheet of the studies, derived from penguins-raw.csv

Usage: build.py [--out DIR]   (default: this script's directory)

The output depends only on the package's files: a rebuild gives the same
rows, graph and text (tests/e2e/analytics.rs checks it).
"""

import argparse
import csv
import importlib.metadata
import json
import os
import sqlite3
import sys
from collections import Counter
from pathlib import Path

VERSION = "0.1.6"
COLUMNS = [
    ("species", "TEXT NOT NULL", str),
    ("island", "TEXT NOT NULL", str),
    ("bill_length_mm", "REAL", float),
    ("bill_depth_mm", "REAL", float),
    ("flipper_length_mm", "INTEGER", int),
    ("body_mass_g", "INTEGER", int),
    ("sex", "TEXT", str),
    ("year", "INTEGER NOT NULL", int),
]


def package_files():
    try:
        dist = importlib.metadata.distribution("palmerpenguins")
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"error: the palmerpenguins package is not installed; "
                 f"python3 -m pip install palmerpenguins=={VERSION}")
    if dist.version != VERSION:
        sys.exit(f"error: palmerpenguins {dist.version} is installed; this data is built "
                 f"from {VERSION}: python3 -m pip install palmerpenguins=={VERSION}")
    data = Path(dist.locate_file("palmerpenguins/data"))
    return dist, data / "penguins.csv", data / "penguins-raw.csv"


def value(text, kind):
    if text == "NA" or text == "":
        return None
    if kind is int:
        return int(float(text))
    return kind(text)


def read_penguins(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [tuple(value(r[name], kind) for name, _, kind in COLUMNS) for r in rows]


def write_database(rows, path):
    if path.exists():
        path.unlink()
    db = sqlite3.connect(path)
    columns = ", ".join(f"{name} {decl}" for name, decl, _ in COLUMNS)
    db.execute(f"CREATE TABLE penguins (id INTEGER PRIMARY KEY, {columns})")
    names = ", ".join(name for name, _, _ in COLUMNS)
    marks = ", ".join("?" for _ in COLUMNS)
    db.executemany(f"INSERT INTO penguins ({names}) VALUES ({marks})", rows)
    db.commit()
    # One file, no WAL: the example ships it as it is.
    db.execute("VACUUM")
    db.close()


def write_graph(rows, path):
    lives_on = Counter((r[0], r[1]) for r in rows)
    sampled_in = Counter((r[1], r[7]) for r in rows)
    nodes = (
        [{"id": f"species:{s}", "kind": "species", "name": s} for s in sorted({r[0] for r in rows})]
        + [{"id": f"island:{i}", "kind": "island", "name": i} for i in sorted({r[1] for r in rows})]
        + [{"id": f"year:{y}", "kind": "year", "name": str(y)} for y in sorted({r[7] for r in rows})]
    )
    edges = [
        {"from": f"species:{s}", "to": f"island:{i}", "relation": "lives-on", "penguins": n}
        for (s, i), n in sorted(lives_on.items())
    ] + [
        {"from": f"island:{i}", "to": f"year:{y}", "relation": "sampled-in", "penguins": n}
        for (i, y), n in sorted(sampled_in.items())
    ]
    graph = {
        "source": f"palmerpenguins {VERSION}, penguins.csv (data CC0)",
        "nodes": nodes,
        "edges": edges,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(graph, indent=1) + "\n", encoding="utf-8")


def section(description, title):
    """The text of one `~~~`-underlined section of the package description."""
    lines = description.splitlines()
    start = lines.index(title) + 2
    end = start
    while end < len(lines) and not (end + 1 < len(lines) and lines[end + 1].startswith("~~~")):
        end += 1
    return "\n".join(lines[start:end]).strip()


def write_docs(dist, raw_path, directory):
    directory.mkdir(parents=True, exist_ok=True)
    description = dist.metadata.get_payload() or ""
    about = (
        f"The Palmer penguins dataset, as described by the palmerpenguins {VERSION} Python package "
        f"(MIT licence, copyright (c) 2020 Muhammad Chenariyan Nakhaee), quoted verbatim.\n\n"
        f"Overview\n\n{section(description, 'Overview')}\n\n"
        f"License\n\n{section(description, 'License')}\n\n"
        f"Bibliography\n\n{section(description, 'Bibliography')}\n"
    )
    (directory / "about.txt").write_text(about, encoding="utf-8")

    with open(raw_path, newline="", encoding="utf-8") as f:
        raw = list(csv.DictReader(f))
    studies = sorted({r["studyName"] for r in raw})
    lines = [
        f"Fact sheet of the studies in penguins-raw.csv (palmerpenguins {VERSION}), "
        f"derived from the file by examples/analytics/data/build.py; the data are CC0.",
        "",
    ]
    for study in studies:
        of = [r for r in raw if r["studyName"] == study]
        dates = sorted(r["Date Egg"] for r in of if r["Date Egg"] not in ("", "NA"))
        islands = sorted({r["Island"] for r in of})
        lines.append(
            f"Study {study} recorded {len(of)} penguins on {', '.join(islands)}, "
            f"with egg dates from {dates[0]} to {dates[-1]}."
        )
    no_isotopes = sum(1 for r in raw if r["Delta 15 N (o/oo)"] in ("", "NA"))
    regions = sorted({r["Region"] for r in raw})
    lines += [
        "",
        f"All {len(raw)} penguins were sampled in the {', '.join(regions)} region.",
        f"Blood isotope ratios are missing for {no_isotopes} of the {len(raw)} penguins.",
    ]
    (directory / "studies.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    out = parser.parse_args().out
    dist, penguins_csv, raw_csv = package_files()
    rows = read_penguins(penguins_csv)
    out.mkdir(parents=True, exist_ok=True)
    write_database(rows, out / "penguins.db")
    write_graph(rows, out / "graph" / "graph.json")
    write_docs(dist, raw_csv, out / "docs")
    print(f"wrote {len(rows)} penguins to {os.fspath(out)}", file=sys.stderr)


if __name__ == "__main__":
    main()
