//! `summary-write`: the last step of the summary scenario. It chooses among
//! the key points of every chunk and writes them as the summary's
//! sentences, each citing its chunk and quoting it verbatim, plus the
//! Markdown the scenario saves. It trusts nothing it quotes: the host's
//! citation check on its node verifies every quote against the chunk's text.

skillhost_sdk::generate!("summary-write");

use std::collections::{BTreeMap, BTreeSet};

use skillhost_sdk::log;

/// The error code for key points too few to summarise.
const TOO_LITTLE_CONTENT: &str = "too-little-content";

/// Two points sharing this fraction of their content words say the same.
const NEAR_DUPLICATE: f64 = 0.6;

struct SummaryWrite;

/// A key point with where its chunk stands in the documents.
struct Candidate<'a> {
    point: &'a KeyPoint,
    chunk: usize,
    source: &'a str,
    words: BTreeSet<String>,
}

impl Guest for SummaryWrite {
    skillhost_sdk::manifest! {
        name: "Summary writer",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        if !(1..=50).contains(&input.max_sentences) {
            return Err(SkillError::invalid_input(format!(
                "max_sentences is {}; give 1 to 50, e.g. 6",
                input.max_sentences
            )));
        }
        let order: BTreeMap<&str, usize> = input
            .chunks
            .iter()
            .enumerate()
            .map(|(i, c)| (c.id.as_str(), i))
            .collect();
        let mut candidates = Vec::new();
        for group in &input.keypoints {
            for point in &group.points {
                let Some(&chunk) = order.get(point.chunk_id.as_str()) else {
                    return Err(SkillError::invalid_input(format!(
                        "key point {:?} names chunk `{}`, which is not among the {} chunk(s)",
                        point.quote,
                        point.chunk_id,
                        input.chunks.len()
                    )));
                };
                candidates.push(Candidate {
                    point,
                    chunk,
                    source: &input.chunks[chunk].source,
                    words: content_words(&point.quote),
                });
            }
        }
        if candidates.is_empty() {
            return Err(SkillError::new(
                TOO_LITTLE_CONTENT,
                format!(
                    "none of the {} chunk(s) has a sentence that qualifies as a key point \
                     (6 to 60 words ending with `.`, `!` or `?`); add documents written in full sentences",
                    input.chunks.len()
                ),
            ));
        }
        let chosen = choose(&candidates, input.max_sentences as usize);
        let output = write(&input, &candidates, &chosen);
        log::info(format!(
            "summary-write: {} sentence(s) from {} key point(s), citing {} chunk(s)",
            output.sentences.len(),
            output.considered,
            output.cited_chunks
        ));
        Ok(output)
    }
}

export!(SummaryWrite);

/// Lowercased words of four or more letters: what two points share when
/// they say the same thing.
fn content_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphabetic())
        .filter(|w| w.chars().count() >= 4)
        .map(str::to_lowercase)
        .collect()
}

fn near_duplicate(a: &BTreeSet<String>, b: &BTreeSet<String>) -> bool {
    let smaller = a.len().min(b.len());
    smaller > 0 && a.intersection(b).count() as f64 >= NEAR_DUPLICATE * smaller as f64
}

/// Indices into `candidates` of the points the summary says, in document
/// order (see the world's doc comment for the rules).
fn choose(candidates: &[Candidate], max: usize) -> Vec<usize> {
    let mut ranked: Vec<usize> = (0..candidates.len()).collect();
    ranked.sort_by(|&a, &b| {
        let (a, b) = (&candidates[a], &candidates[b]);
        b.point
            .score
            .cmp(&a.point.score)
            .then(a.chunk.cmp(&b.chunk))
            .then(a.point.start.cmp(&b.point.start))
    });
    let mut chosen: Vec<usize> = Vec::new();
    let take = |i: usize, chosen: &mut Vec<usize>| {
        let fits = chosen.len() < max
            && !chosen.contains(&i)
            && !chosen
                .iter()
                .any(|&c| near_duplicate(&candidates[c].words, &candidates[i].words));
        if fits {
            chosen.push(i);
        }
    };
    // Every document's best point first, in document order.
    let mut sources: Vec<&str> = Vec::new();
    let mut by_position: Vec<usize> = (0..candidates.len()).collect();
    by_position.sort_by_key(|&i| (candidates[i].chunk, candidates[i].point.start));
    for &i in &by_position {
        if !sources.contains(&candidates[i].source) {
            sources.push(candidates[i].source);
        }
    }
    for source in sources {
        if let Some(&best) = ranked.iter().find(|&&i| candidates[i].source == source) {
            take(best, &mut chosen);
        }
    }
    for &i in &ranked {
        take(i, &mut chosen);
    }
    chosen.sort_by_key(|&i| (candidates[i].chunk, candidates[i].point.start));
    chosen
}

/// The summary's sentences and Markdown.
fn write(input: &Input, candidates: &[Candidate], chosen: &[usize]) -> Output {
    let title = match input.title.trim() {
        "" => "the documents",
        title => title,
    };
    // Citation numbers, in the order the chunks are first cited.
    let mut cited: Vec<usize> = Vec::new();
    let mut sentences = Vec::new();
    let mut body = String::new();
    let mut current_source = None;
    for (n, &i) in chosen.iter().enumerate() {
        let candidate = &candidates[i];
        let point = candidate.point;
        if !cited.contains(&candidate.chunk) {
            cited.push(candidate.chunk);
        }
        let number = cited
            .iter()
            .position(|&c| c == candidate.chunk)
            .unwrap_or(0)
            + 1;
        if current_source != Some(candidate.source) {
            if current_source.is_some() {
                body.push_str("\n\n");
            }
            current_source = Some(candidate.source);
        } else {
            body.push(' ');
        }
        body.push_str(&format!("{} [{number}]", point.quote));
        sentences.push(Sentence {
            id: format!("S{}", n + 1),
            text: point.quote.clone(),
            chunk_ids: vec![point.chunk_id.clone()],
            quotes: vec![point.quote.clone()],
        });
    }
    let mut markdown = format!("# Summary: {title}\n\n{body}\n\n## Sources\n\n");
    for (n, &chunk) in cited.iter().enumerate() {
        let c = &input.chunks[chunk];
        markdown.push_str(&format!(
            "[{}] `{}`: `{}`, characters {}-{}\n",
            n + 1,
            c.id,
            c.source,
            c.start,
            c.end
        ));
    }
    Output {
        title: title.to_string(),
        sentences,
        markdown,
        cited_chunks: cited.len() as u32,
        considered: candidates.len() as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: &str, source: &str, start: u32) -> Chunk {
        Chunk {
            id: id.into(),
            source: source.into(),
            start,
            end: start + 100,
            text: String::new(),
        }
    }

    fn point(chunk_id: &str, quote: &str, score: i32, start: u32) -> KeyPoint {
        KeyPoint {
            chunk_id: chunk_id.into(),
            quote: quote.into(),
            start,
            end: start + quote.chars().count() as u32,
            score,
            rules: vec![],
        }
    }

    fn input(max: u32) -> Input {
        let points = |id: &str, source: &str, ps: Vec<KeyPoint>| ChunkPoints {
            chunk_id: id.into(),
            source: source.into(),
            points: ps,
        };
        Input {
            title: "Rivers".into(),
            chunks: vec![
                chunk("a#1", "a", 0),
                chunk("a#2", "a", 101),
                chunk("b#1", "b", 0),
            ],
            keypoints: vec![
                points(
                    "a#1",
                    "a",
                    vec![
                        point("a#1", "Rivers carry sediment to the sea.", 9, 0),
                        point("a#1", "Rivers carry sediment toward the sea.", 8, 40),
                    ],
                ),
                points(
                    "a#2",
                    "a",
                    vec![point("a#2", "Floods renew the soil of plains.", 5, 3)],
                ),
                points(
                    "b#1",
                    "b",
                    vec![point("b#1", "Deltas grow where currents slow.", 1, 0)],
                ),
            ],
            max_sentences: max,
        }
    }

    #[test]
    fn every_document_is_heard_then_the_best_in_document_order() {
        let out = SummaryWrite::run(input(3)).unwrap();
        let said: Vec<(&str, &str)> = out
            .sentences
            .iter()
            .map(|s| (s.chunk_ids[0].as_str(), s.quotes[0].as_str()))
            .collect();
        // The near-duplicate of the first point is left out; b's only
        // point is taken despite its low score.
        assert_eq!(
            said,
            [
                ("a#1", "Rivers carry sediment to the sea."),
                ("a#2", "Floods renew the soil of plains."),
                ("b#1", "Deltas grow where currents slow."),
            ]
        );
        assert_eq!(out.cited_chunks, 3);
        assert_eq!(out.considered, 4);
        assert!(out.markdown.starts_with(
            "# Summary: Rivers\n\nRivers carry sediment to the sea. [1] \
             Floods renew the soil of plains. [2]\n\nDeltas grow where currents slow. [3]\n\n## Sources\n\n\
             [1] `a#1`: `a`, characters 0-100\n"
        ), "{}", out.markdown);

        let out = SummaryWrite::run(input(1)).unwrap();
        assert_eq!(out.sentences.len(), 1);
        assert_eq!(out.sentences[0].id, "S1");
    }

    #[test]
    fn refuses_no_points_and_unknown_chunks() {
        let mut empty = input(3);
        empty.keypoints.iter_mut().for_each(|k| k.points.clear());
        assert_eq!(
            SummaryWrite::run(empty).unwrap_err().code,
            TOO_LITTLE_CONTENT
        );
        let mut unknown = input(3);
        unknown.keypoints[0].points[0].chunk_id = "zz#9".into();
        let e = SummaryWrite::run(unknown).unwrap_err();
        assert!(e.message.contains("`zz#9`"), "{}", e.message);
    }
}
