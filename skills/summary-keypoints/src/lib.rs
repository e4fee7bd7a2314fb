//! `summary-keypoints`: the map step of the summary scenario, one chunk per
//! call. It splits the chunk into paragraphs and sentences, scores every
//! sentence that qualifies by explicit rules (the world's doc comment lists
//! them), and returns the best as key points, each a verbatim quote with
//! its offsets in the chunk and the rules that scored it. It sees one chunk
//! only: choosing among chunks is the writer's job.

// The generated export of a record this wide takes its fields flattened.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("summary-keypoints");

mod rules;

use skillhost_sdk::log;

struct SummaryKeypoints;

impl Guest for SummaryKeypoints {
    skillhost_sdk::manifest! {
        name: "Summary key points",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let chunk = input.chunk;
        if !(1..=10).contains(&input.max_points) {
            return Err(SkillError::invalid_input(format!(
                "max_points is {}; give 1 to 10, e.g. 2",
                input.max_points
            )));
        }
        if chunk.end < chunk.start {
            return Err(SkillError::invalid_input(format!(
                "chunk `{}` ends ({}) before it starts ({})",
                chunk.id, chunk.end, chunk.start
            )));
        }
        let mut scored = rules::score_sentences(&chunk.text);
        let candidates = scored.len();
        // Best first, ties to the earlier sentence; then back in text order.
        scored.sort_by(|a, b| b.score.cmp(&a.score).then(a.start.cmp(&b.start)));
        scored.truncate(input.max_points as usize);
        scored.sort_by_key(|s| s.start);
        let points: Vec<KeyPoint> = scored
            .into_iter()
            .map(|s| KeyPoint {
                chunk_id: chunk.id.clone(),
                quote: chunk.text[s.start..s.end].to_string(),
                start: chars_before(&chunk.text, s.start),
                end: chars_before(&chunk.text, s.end),
                score: s.score,
                rules: s.rules,
            })
            .collect();
        log::info(format!(
            "summary-keypoints: chunk `{}`: {candidates} sentence(s) qualify, {} kept",
            chunk.id,
            points.len()
        ));
        Ok(Output {
            chunk_id: chunk.id,
            source: chunk.source,
            points,
        })
    }
}

export!(SummaryKeypoints);

/// Characters (Unicode scalar values) of `text` before byte `at`.
fn chars_before(text: &str, at: usize) -> u32 {
    u32::try_from(text[..at].chars().count()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Chunk {
        Chunk {
            id: "a.md#1".into(),
            source: "a.md".into(),
            start: 10,
            end: 10 + text.chars().count() as u32,
            text: text.into(),
        }
    }

    #[test]
    fn keeps_the_best_sentences_verbatim_with_their_offsets() {
        let text = "Rivers\n\nA river carries water, sediment and nutrients from \
                    highlands toward the sea. It is short. This is mostly a filler sentence here?\n\n\
                    Deltas form because a river slows and drops its sediment at the coast. \
                    Some of the largest deltas cover more than 100000 square kilometres.";
        let out = SummaryKeypoints::run(Input {
            chunk: chunk(text),
            max_points: 2,
        })
        .unwrap();
        assert_eq!(out.chunk_id, "a.md#1");
        let quotes: Vec<&str> = out.points.iter().map(|p| p.quote.as_str()).collect();
        assert_eq!(
            quotes,
            [
                "A river carries water, sediment and nutrients from highlands toward the sea.",
                "Deltas form because a river slows and drops its sediment at the coast.",
            ]
        );
        for p in &out.points {
            let chars: Vec<char> = text.chars().collect();
            let at: String = chars[p.start as usize..p.end as usize].iter().collect();
            assert_eq!(at, p.quote);
        }
        assert!(
            out.points[1].rules.contains(&"cue:because:2".to_string()),
            "{:?}",
            out.points[1].rules
        );
    }

    #[test]
    fn refuses_bad_bounds_and_keeps_nothing_from_fragments() {
        let e = SummaryKeypoints::run(Input {
            chunk: chunk("x"),
            max_points: 0,
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid-input");
        let out = SummaryKeypoints::run(Input {
            chunk: chunk("Title only\n\nToo short."),
            max_points: 3,
        })
        .unwrap();
        assert!(out.points.is_empty());
    }
}
