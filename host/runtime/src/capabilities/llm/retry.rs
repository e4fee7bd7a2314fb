//! How long to wait before retrying a provider that answered 429 or 5xx:
//! what its `Retry-After` asks, else an exponential backoff.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
/// an HTTP date (IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`; a date past
/// is no wait). `None` for a value that is neither.
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value.parse::<u64>().ok().map(Duration::from_secs);
    }
    let at = http_date(value)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// An IMF-fixdate as a time.
fn http_date(value: &str) -> Option<SystemTime> {
    // `Sun, 06 Nov 1994 08:49:37 GMT`
    let (_weekday, rest) = value.split_once(", ")?;
    let mut parts = rest.split(' ');
    let day: u32 = parts.next()?.parse().ok()?;
    let month = match parts.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = parts.next()?.parse().ok()?;
    let mut clock = parts.next()?.split(':');
    let hour: u64 = clock.next()?.parse().ok()?;
    let minute: u64 = clock.next()?.parse().ok()?;
    let second: u64 = clock.next()?.parse().ok()?;
    if parts.next()? != "GMT" || parts.next().is_some() || clock.next().is_some() {
        return None;
    }
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    let seconds = u64::try_from(days).ok()? * 86_400 + hour * 3600 + minute * 60 + second;
    Some(UNIX_EPOCH + Duration::from_secs(seconds))
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar
/// (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(http_date("Thu, 01 Jan 1970 00:00:00 GMT"), Some(UNIX_EPOCH));
        assert_eq!(
            http_date("Tue, 29 Feb 2028 12:00:00 GMT"),
            Some(UNIX_EPOCH + Duration::from_secs(1_835_438_400))
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
