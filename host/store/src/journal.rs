//! What pins a journal row: its request digest and its row digest, how both
//! are written and how a row read back is checked against them.
//!
//! A journal row is what a replay answers a host call with, so it is
//! pinned like a checkpoint: [`JournalDigest`] covers its request and
//! response (as stored) and its run, seq, node, map item, entry index and
//! kind, and a row that no longer matches says which of those parts
//! changed. Rows written before schema version 6 have no digest (the
//! migration marks them `legacy`) and are accepted as they are; a row
//! without a digest is refused.
//!
//! Backend-neutral: backends move the columns, the rules live here.

use sha2::{Digest, Sha256};

use crate::rows::JournalEntry;

/// What a journal row's digest is for rows written before schema version 6.
pub(crate) const LEGACY_JOURNAL: &str = "legacy";

const JOURNAL_DIGEST_V1: &str = "j1:";
const DIGEST_PART: usize = 12;

/// What a digest part covers, in the order of the parts.
const JOURNAL_PARTS: [&str; 3] = [
    "request",
    "response",
    "run, seq, node, item, entry index or kind",
];

/// The digest a journal row carries: `j1:` and three 12-hex-digit parts
/// (SHA-256 prefixes), of its request text, its response text, and its run
/// id, seq, node id, map item, entry index and kind. Not a signature.
pub(crate) struct JournalDigest;

impl JournalDigest {
    pub fn of(run_id: &str, entry: &JournalEntry, request: &str, response: &str) -> String {
        let mut digest = String::with_capacity(JOURNAL_DIGEST_V1.len() + 3 * DIGEST_PART);
        digest.push_str(JOURNAL_DIGEST_V1);
        for part in Self::parts(run_id, entry, request, response) {
            digest.push_str(&part);
        }
        digest
    }

    fn parts(run_id: &str, entry: &JournalEntry, request: &str, response: &str) -> [String; 3] {
        let seq = entry.seq.to_string();
        let item = entry.item.map_or_else(|| "-".to_owned(), |i| i.to_string());
        let index = entry.entry.to_string();
        [
            part(&[request]),
            part(&[response]),
            part(&[run_id, &seq, &entry.node_id, &item, &index, &entry.kind]),
        ]
    }

    /// Checks a row read back (`request` and `response` as stored) against
    /// its recorded digests: None if it matches (or is older than them),
    /// else what does not.
    pub fn mismatch(
        run_id: &str,
        entry: &JournalEntry,
        request: &str,
        response: &str,
        request_digest: Option<&str>,
        digest: Option<&str>,
    ) -> Option<String> {
        let digest = match digest {
            Some(LEGACY_JOURNAL) => return None,
            None => {
                return Some(
                    "it has no digest, though it was written by a host that records one".into(),
                );
            }
            Some(digest) => digest,
        };
        let Some(recorded) = digest.strip_prefix(JOURNAL_DIGEST_V1) else {
            return Some(format!("its digest `{digest}` is not one this host writes"));
        };
        let actual = Self::parts(run_id, entry, request, response);
        let mut wrong: Vec<&str> = actual
            .iter()
            .enumerate()
            .filter(|(i, part)| recorded.get(i * DIGEST_PART..(i + 1) * DIGEST_PART) != Some(part))
            .map(|(i, _)| JOURNAL_PARTS[i])
            .collect();
        if request_digest != Some(entry.request_digest().as_str()) {
            wrong.push("request digest");
        }
        (!wrong.is_empty()).then(|| {
            format!(
                "what it stores no longer matches the digest recorded when it was committed: \
                 its {}",
                wrong.join(", ")
            )
        })
    }
}

/// The digest a map item row carries over what a resumed map node reuses
/// besides its output (which its output hash pins): the attempt it came
/// from and its journal, as stored. `m1:` and a SHA-256 prefix.
pub(crate) fn map_item_digest(attempt: i64, journal: Option<&str>) -> String {
    let attempt = attempt.to_string();
    format!("m1:{}", part(&[attempt.as_str(), journal.unwrap_or("")]))
}

/// One part of a digest: a SHA-256 prefix over length-prefixed fields.
fn part(fields: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for field in fields {
        hasher.update((field.len() as u64).to_le_bytes());
        hasher.update(field.as_bytes());
    }
    hex::encode(&hasher.finalize()[..DIGEST_PART / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn entry() -> JournalEntry {
        JournalEntry {
            seq: 3,
            node_id: "fetch".into(),
            item: Some(1),
            entry: 0,
            kind: "kv".into(),
            request: json!({"op": "get", "key": "a"}),
            response: json!({"ok": null}),
        }
    }

    #[test]
    fn a_journal_digest_names_the_part_that_changed() {
        let entry = entry();
        let (request, response) = (entry.request.to_string(), entry.response.to_string());
        let digest = entry.digest("r");
        let request_digest = entry.request_digest();
        let check = |entry: &JournalEntry, request: &str, response: &str| {
            JournalDigest::mismatch(
                "r",
                entry,
                request,
                response,
                Some(&request_digest),
                Some(&digest),
            )
        };
        assert_eq!(check(&entry, &request, &response), None);
        let changed = check(&entry, &request, r#"{"ok":"MQ=="}"#).unwrap();
        assert!(changed.ends_with("committed: its response"), "{changed}");
        let mut moved = entry.clone();
        moved.item = Some(2);
        let changed = check(&moved, &request, &response).unwrap();
        assert!(
            changed.ends_with("its run, seq, node, item, entry index or kind"),
            "{changed}"
        );
        let mut asked = entry.clone();
        asked.request = json!({"op": "get", "key": "b"});
        let changed = check(&asked, &asked.request.to_string(), &response).unwrap();
        assert!(
            changed.ends_with("its request, request digest"),
            "{changed}"
        );
        assert_eq!(
            JournalDigest::mismatch("r", &entry, &request, &response, None, Some("legacy")),
            None
        );
        assert!(
            JournalDigest::mismatch("r", &entry, &request, &response, None, None)
                .unwrap()
                .contains("has no digest")
        );
    }

    #[test]
    fn a_skill_nodes_entries_and_item_0s_are_told_apart() {
        let mut item_0 = entry();
        item_0.item = Some(0);
        let mut plain = entry();
        plain.item = None;
        assert_ne!(item_0.digest("r"), plain.digest("r"));
    }
}
