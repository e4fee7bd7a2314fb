//! `paper-discovery`: finds the papers of an offline corpus that match a
//! query. The corpus is a directory of `*.jsonl` files (one JSON paper per
//! line, see examples/research/CORPUS.md) read through the `fs` capability;
//! papers are ranked with BM25 over their title (counted twice) and
//! abstract. Deterministic: same corpus and input, same output.

skillhost_sdk::generate!(
    "paper-discovery",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

mod corpus;
mod rank;

use skillhost_sdk::log;

use corpus::CorpusPaper;

/// Scores are rounded to this many decimals, so that they print stably and
/// compare equal across platforms.
const SCORE_DECIMALS: i32 = 4;

struct PaperDiscovery;

impl Guest for PaperDiscovery {
    skillhost_sdk::manifest! {
        name: "Paper discovery",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 20,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let terms = rank::tokenize(&input.query);
        if terms.is_empty() {
            return Err(SkillError::invalid_input(format!(
                "query {:?} has no searchable words (after dropping stopwords and one-letter words)",
                input.query
            )));
        }
        if input.max_results == 0 {
            return Err(SkillError::invalid_input(
                "`max_results` is 0; ask for at least one paper",
            ));
        }
        if input.min_score.is_nan() {
            return Err(SkillError::invalid_input("`min_score` is not a number"));
        }
        let (papers, files) = corpus::load(&input.corpus_dir)?;
        let output = search(papers, &terms, &input);
        log::info(format!(
            "searched {} papers in {files} file(s) for {:?}: {} matched, returning {} ({} valid)",
            output.considered,
            terms.join(" "),
            output.matched,
            output.papers.len(),
            output.papers.iter().filter(|p| p.valid).count(),
        ));
        Ok(output)
    }
}

export!(PaperDiscovery);

fn round_score(score: f64) -> f64 {
    let scale = 10f64.powi(SCORE_DECIMALS);
    (score * scale).round() / scale
}

/// Ranks `papers` for the query `terms` and keeps the best.
fn search(papers: Vec<CorpusPaper>, terms: &[String], input: &Input) -> Output {
    let index = rank::Index::new(
        papers
            .iter()
            .map(|p| (p.title.as_str(), p.abstract_.as_str())),
    );
    let scores = index.scores(terms);
    let considered = u32::try_from(papers.len()).unwrap_or(u32::MAX);
    let mut hits: Vec<(f64, CorpusPaper)> = papers
        .into_iter()
        .zip(scores)
        .map(|(paper, score)| (round_score(score), paper))
        .filter(|(score, _)| *score > 0.0 && *score >= input.min_score)
        .collect();
    hits.sort_by(|(sa, a), (sb, b)| sb.total_cmp(sa).then_with(|| a.id.cmp(&b.id)));
    let matched = u32::try_from(hits.len()).unwrap_or(u32::MAX);
    hits.truncate(input.max_results as usize);
    let papers = hits
        .into_iter()
        .map(|(score, p)| Paper {
            valid: p.issues.is_empty(),
            id: p.id,
            title: p.title,
            authors: p.authors,
            abstract_: p.abstract_,
            url: p.url,
            source: p.source,
            published: p.published,
            year: p.year,
            topics: p.topics,
            score,
            issues: p.issues,
        })
        .collect();
    Output {
        papers,
        considered,
        matched,
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use skillhost_sdk::testing;

    fn input(query: &str, dir: &str, max_results: u32, min_score: f64) -> Input {
        Input {
            query: query.to_string(),
            corpus_dir: dir.to_string(),
            max_results,
            min_score,
        }
    }

    fn fixture(files: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "paper-discovery-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn line(id: &str, title: &str, abstract_: &str) -> String {
        format!(
            r#"{{"id": "{id}", "title": "{title}", "authors": ["Ada Lovelace"], "abstract": "{abstract_}", "url": "https://papers.example.org/{id}", "source": "arXiv", "published": "2020-01-02", "topics": ["t"]}}"#
        )
    }

    fn small_corpus() -> PathBuf {
        let a = [
            line(
                "a-1",
                "Graph networks for molecules",
                "We study graph networks.",
            ),
            line(
                "a-2",
                "Unrelated title",
                "Graph networks appear in the abstract only, among several other words.",
            ),
            line("a-3", "Plasma", "Nothing about the query."),
        ]
        .join("\n");
        let b = [
            line("b-1", "Graph networks for molecules", "We study graph networks."),
            r#"{"id": "b-2", "title": "Graph networks without a url", "abstract": "Graph networks."}"#.to_string(),
        ]
        .join("\n");
        fixture(&[
            ("corpus/a.jsonl", &a),
            ("corpus/b.jsonl", &b),
            ("corpus/notes.txt", "not a corpus file"),
            ("corpus/sub/c.jsonl", "this is not read"),
        ])
    }

    fn ids(out: &Output) -> Vec<&str> {
        out.papers.iter().map(|p| p.id.as_str()).collect()
    }

    #[test]
    fn ranks_by_score_then_id_and_flags_invalid_papers() {
        let dir = small_corpus();
        testing::set_fs_root(&dir);
        let out = PaperDiscovery::run(input("graph networks", "corpus", 10, 0.0)).unwrap();
        assert_eq!((out.considered, out.matched), (5, 4));
        // The short b-2 ranks first; a-1 and b-1 are identical, so they tie
        // and sort by id.
        assert_eq!(ids(&out)[..3], ["b-2", "a-1", "b-1"]);
        assert_eq!(out.papers[1].score, out.papers[2].score);
        let scores: Vec<f64> = out.papers.iter().map(|p| p.score).collect();
        assert!(scores.windows(2).all(|w| w[0] >= w[1]), "{scores:?}");
        let b2 = out.papers.iter().find(|p| p.id == "b-2").unwrap();
        assert!(!b2.valid);
        assert_eq!(b2.issues, ["missing url"]);
        assert_eq!(b2.authors, Vec::<String>::new());
        let a1 = &out.papers[1];
        assert!(a1.valid && a1.issues.is_empty());
        assert_eq!(a1.year, 2020);
        assert_eq!(a1.url, "https://papers.example.org/a-1");
        assert!(testing::take_logs()[0].1.contains("4 matched"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn max_results_and_min_score_filter() {
        let dir = small_corpus();
        testing::set_fs_root(&dir);
        let all = PaperDiscovery::run(input("graph networks", "corpus", 10, 0.0)).unwrap();
        let top = PaperDiscovery::run(input("graph networks", "corpus", 2, 0.0)).unwrap();
        assert_eq!(ids(&top), ids(&all)[..2]);
        assert_eq!(top.matched, 4);
        let threshold = all.papers[2].score;
        let some = PaperDiscovery::run(input("graph networks", "corpus", 10, threshold)).unwrap();
        assert_eq!(ids(&some), ids(&all)[..3]);
        assert_eq!(some.matched, 3);
        let none = PaperDiscovery::run(input("zebra", "corpus", 10, 0.0)).unwrap();
        assert_eq!(
            (none.papers.len(), none.matched, none.considered),
            (0, 0, 5)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_root_directory_works_with_an_empty_corpus_dir() {
        let dir = fixture(&[("x.jsonl", &line("x-1", "Tokamak plasma", "Disruptions."))]);
        testing::set_fs_root(&dir);
        let out = PaperDiscovery::run(input("tokamak", "", 5, 0.0)).unwrap();
        assert_eq!(ids(&out), ["x-1"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn bad_inputs_and_corpora_are_errors() {
        let dir = fixture(&[
            (
                "bad/a.jsonl",
                &format!("{}\n{{oops\n", line("a", "T", "A.")),
            ),
            ("dup/a.jsonl", &line("same", "T", "A.")),
            ("dup/b.jsonl", &format!("\n{}", line("same", "T", "A."))),
            ("empty/readme.md", "no corpus here"),
        ]);
        let run = |q: &str, d: &str, n: u32, s: f64| PaperDiscovery::run(input(q, d, n, s));
        assert_eq!(
            run("graph", "bad", 5, 0.0).unwrap_err().code,
            "capability-not-granted"
        );
        testing::set_fs_root(&dir);
        let e = run("graph", "bad", 5, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid-corpus");
        assert!(e.message.starts_with("bad/a.jsonl:2: "), "{}", e.message);
        let e = run("graph", "dup", 5, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid-corpus");
        assert!(
            e.message.contains("dup/b.jsonl:2") && e.message.contains("dup/a.jsonl:1"),
            "{}",
            e.message
        );
        let e = run("graph", "empty", 5, 0.0).unwrap_err();
        assert_eq!(e.code, "invalid-corpus");
        assert_eq!(
            run("graph", "missing", 5, 0.0).unwrap_err().code,
            "not-found"
        );
        assert_eq!(
            run("graph", "../x", 5, 0.0).unwrap_err().code,
            "invalid-path"
        );
        assert_eq!(
            run("the of a", "dup", 5, 0.0).unwrap_err().code,
            "invalid-input"
        );
        assert_eq!(
            run("graph", "dup", 0, 0.0).unwrap_err().code,
            "invalid-input"
        );
        assert_eq!(
            run("graph", "dup", 5, f64::NAN).unwrap_err().code,
            "invalid-input"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn shipped_corpus() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/research/corpus")
    }

    #[test]
    fn finds_papers_in_the_shipped_corpus() {
        testing::set_fs_root(shipped_corpus());
        let out = PaperDiscovery::run(input("retrieval augmented generation", "", 8, 0.0)).unwrap();
        assert!(out.considered >= 220, "{}", out.considered);
        assert_eq!(out.papers.len(), 8);
        assert!(out.papers.iter().filter(|p| p.valid).count() >= 3);
        assert!(
            out.papers.iter().all(|p| p.id.starts_with("rag-")),
            "{:?}",
            ids(&out)
        );
        let out = PaperDiscovery::run(input("tokamak plasma disruption", "", 8, 0.0)).unwrap();
        assert_eq!(out.papers.len(), 2, "{:?}", ids(&out));
        let out = PaperDiscovery::run(input("medieval poetry", "", 8, 0.0)).unwrap();
        assert!(out.papers.is_empty());
        // Same input, same output.
        let again = PaperDiscovery::run(input("federated learning privacy", "", 10, 0.0)).unwrap();
        let once = PaperDiscovery::run(input("federated learning privacy", "", 10, 0.0)).unwrap();
        assert_eq!(again, once);
    }

    #[test]
    fn manifest_declares_fs() {
        let m = PaperDiscovery::manifest();
        assert_eq!(m.id, "paper-discovery");
        assert_eq!(m.capabilities, ["fs", "log"]);
    }
}
