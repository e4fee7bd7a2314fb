//! Durations as people write them in flags and scenario files: `7d`, `12h`,
//! `30m`, `45s`, `500ms`, `2w` (a bare number is seconds). Shared so that a
//! retention, a lease and a node cache's `ttl` read the same way.

use std::time::Duration;

/// Parses a duration like `7d`, `12h`, `30m`, `45s` or `500ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` is not a duration; use e.g. 7d, 12h, 30m, 45s"))?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" | "" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        _ => {
            return Err(format!(
                "`{text}` has an unknown unit `{unit}`; use ms, s, m, h, d or w"
            ));
        }
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("`{text}` is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_durations() {
        assert_eq!(
            parse_duration("7d").unwrap(),
            Duration::from_secs(7 * 86_400)
        );
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(
            parse_duration("2w").unwrap(),
            Duration::from_secs(14 * 86_400)
        );
        assert!(parse_duration("d").is_err());
        assert!(parse_duration("3 years").is_err());
    }
}
