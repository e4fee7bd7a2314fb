//! How long to wait before retrying a provider that answered 429 or 5xx:
//! what its `Retry-After` asks, else an exponential backoff.

use std::time::{Duration, SystemTime};

/// The wait before the first retry when the provider does not say;
/// doubled for each further one.
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait the backoff alone chooses.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The wait before retry `retry` (0 for the first) when the provider asks
/// for none.
pub(crate) fn backoff(retry: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1u32 << retry.min(16))
        .min(MAX_BACKOFF)
}

/// The wait a `Retry-After` value asks for at `now`: a number of seconds, or
/// an HTTP date in any of the three formats RFC 9110 has a recipient accept
/// (a date past is no wait). `None` for a value that is neither.
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    #[test]
    fn retry_after_takes_seconds_or_a_date() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // 1994-11-06 08:49:37
        assert_eq!(retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(" 0 ", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        // A date past asks for no wait.
        assert_eq!(
            retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        // RFC 850 and asctime dates too.
        assert_eq!(
            retry_after("Sunday, 06-Nov-94 08:49:47 GMT", now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after("Sun Nov  6 08:49:47 1994", now),
            Some(Duration::from_secs(10))
        );
        for bad in [
            "",
            "soon",
            "-1",
            "1.5",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(retry_after(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(3), Duration::from_secs(4));
        assert_eq!(backoff(10), Duration::from_secs(30));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(30));
    }
}
